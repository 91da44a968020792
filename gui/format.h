#pragma once
// Text and colour conventions shared by every page and the reports, so a number reads the same
// in the runs browser, a tooltip and an exported HTML table.
#include <QColor>
#include <QString>
#include <cstdint>

#include "engine/core/request.h"

namespace fragscope::gui {

// "1.50 GiB", "20.0 MiB", "512 B": binary units, three significant digits.
QString formatBytes(double bytes);
// "1,234,567".
QString formatCount(std::uint64_t count);
// Signed difference "+12.0 MiB" / "−3.00 GiB" (a minus sign, not a hyphen).
QString formatBytesDelta(double delta);
// A per-process memory cap in PyTorch's own words: "6.00 GiB allowed".
QString formatAllowed(double bytes);

// The series colours of the timeline and the block colours of the segment map. One table so the
// legend, the plot and the report agree; tuned to read on both the light and the dark palette.
namespace colors {
inline const QColor allocated{0x2b, 0x7b, 0xd6};
inline const QColor reserved{0xe0, 0x8a, 0x1e};
inline const QColor active{0x3b, 0xa5, 0x5c};
inline const QColor oom{0xd6, 0x2d, 0x2d};
inline const QColor cursor{0x9b, 0x59, 0xb6};
inline const QColor blockAllocated{0x2b, 0x7b, 0xd6};
inline const QColor blockPendingFree{0xf2, 0xc1, 0x4e};
inline const QColor freeInSplitSegment{0xe8, 0x6a, 0x5c};
inline const QColor freeWholeSegment{0xa8, 0xb3, 0xbd};
// Colour of the n-th run in comparison overlays.
QColor run(int index);
// The timeline's category stack: mid-tones that stay readable on the light and the dark plot
// background, distinct from the allocated / reserved / active curves drawn over them.
QColor category(Category kind);
}  // namespace colors

}  // namespace fragscope::gui
