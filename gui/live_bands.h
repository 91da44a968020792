#pragma once
// The lifetimes behind the Active Memory Timeline and the Segment timeline, and their raster.
//
// A lifetime is one allocation (alloc .. free_completed) or one segment (cudaMalloc .. cudaFree,
// or a mapped range of an expandable segment). Both views draw every live lifetime as a band,
// stacked in the order they began (memory_viz's layout: a band drops when one below it ends), at
// the cursor positions of the run's events. The raster picks, for each pixel column, the cursor
// of the column's highest total, so every peak is drawn at any zoom, and records which lifetime
// covers each pixel, so hover and click find it without another pass. No Qt here: the loaders
// and the page run it off the GUI thread.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "engine/core/cancel.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "storage/db/segment_map.h"

namespace fragscope::gui {

enum class LifetimeKind : std::uint8_t { allocations, segments };

struct Lifetime {
  // Cursor positions (events applied): live for begin <= cursor < end. An allocation made at
  // event i begins at i + 1; one freed at event j ends at j + 1. A lifetime that existed before
  // the trace began (a mid-run snapshot) begins at 0; one never freed ends at eventCount + 1.
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t addr = 0;
  Bytes size = 0;
  StreamId stream{};
  FrameStackId frames{};
  Category category = Category::unknown;
  bool expandable = false;  // segments: a mapped range of an expandable segment
  bool beforeTrace() const { return begin == 0; }
  bool neverFreed(std::uint64_t eventCount) const { return end > eventCount; }
};

struct Lifetimes {
  LifetimeKind kind = LifetimeKind::allocations;
  std::uint64_t eventCount = 0;
  std::vector<Lifetime> items;  // sorted by begin (then by address): the stacking order
  // totals[c]: bytes live at cursor c (c = 0 .. eventCount).
  std::vector<std::int64_t> totals;
  bool labelled = false;  // categories come from the run's labels (simulated workloads)
  bool hasStacks = false;
};

// Builds the lifetimes from a run's events. `initial` is the state before the first event (the
// blocks or segments a mid-run trace starts with); `categories[i]` is event i's category (empty:
// none). Polls `control` every few thousand events.
class LifetimeBuilder {
 public:
  LifetimeBuilder(LifetimeKind kind, const storage::SegmentMap& initial);
  // Events in order, continuing where the last call stopped; categories may be empty.
  void add(std::span<const TraceEvent> events, std::span<const Category> categories = {});
  Lifetimes finish() &&;

 private:
  void begin(const Lifetime& lifetime);
  void endAt(std::uint64_t addr, std::uint64_t cursor);
  void unmapRange(std::uint64_t addr, Bytes size, std::uint64_t cursor);

  Lifetimes m_out;
  std::int64_t m_live = 0;
  std::uint64_t m_next = 0;  // index of the next event
  // Live lifetimes by address (blocks) or base (segments, mapped ranges): index into items.
  std::map<std::uint64_t, std::size_t> m_open;
};

// One pixel column per x, one row per y (row 0 at the top). ids[y * width + x] is the index + 1
// into Lifetimes::items of the band covering that pixel, 0 where nothing is.
struct BandRaster {
  std::uint64_t first = 0;  // the cursor range drawn, [first, end)
  std::uint64_t end = 0;
  int width = 0;
  int height = 0;
  std::int64_t maxBytes = 0;           // the value at the top row
  std::vector<std::uint64_t> cursors;  // per column: the cursor drawn (the column's peak)
  std::vector<std::uint32_t> ids;
  std::optional<std::size_t> itemAt(int x, int y) const;
};

// The highest total over cursors [first, end).
std::int64_t peakTotal(const Lifetimes& lifetimes, std::uint64_t first, std::uint64_t end);
// Rasterises cursors [first, end) into width x height pixels with `maxBytes` at the top (0: the
// peak of the range). Throws Cancelled when `cancel` fires.
BandRaster renderBands(const Lifetimes& lifetimes, std::uint64_t first, std::uint64_t end,
                       int width, int height, std::int64_t maxBytes = 0,
                       const CancelToken& cancel = {});

}  // namespace fragscope::gui
