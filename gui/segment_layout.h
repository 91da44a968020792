#pragma once
// The segment map broken into what the user sees: every segment as a run of pieces (live
// blocks and the free gaps between them), classified the way fragmentation is explained —
// allocated, pending free (freed on the host, still in use by a stream), free inside a split
// segment (reusable only by requests that fit the gap) and a wholly free segment (which
// empty_cache() would return). Plain data, no widgets, so tests can compare it with the engine.
#include <QRectF>
#include <QSizeF>
#include <cstdint>
#include <vector>

#include "storage/db/segment_map.h"

namespace fragscope::gui {

enum class PieceKind : std::uint8_t {
  allocated,
  pendingFree,
  freeInSplitSegment,
  freeWholeSegment
};
const char* pieceKindName(PieceKind kind);

// How the segment map draws a segment: its pool (engine/core/pool_kind.h), or expandable.
enum class SegmentKind : std::uint8_t { small, large, expandable };
const char* segmentKindName(SegmentKind kind);

struct Piece {
  std::uint64_t addr = 0;
  Bytes size = 0;
  PieceKind kind = PieceKind::allocated;
  FrameStackId frames{};
};

struct SegmentView {
  storage::SegmentRange segment;
  SegmentKind pool = SegmentKind::large;
  std::vector<Piece> pieces;  // address order, covering [base, base + size) exactly
  Bytes liveBytes = 0;
  Bytes largestFree = 0;
};

struct SegmentMapSummary {
  std::size_t segments = 0;
  std::size_t blocks = 0;
  Bytes reserved = 0;
  Bytes live = 0;  // allocated + pending free (request sizes)
  Bytes pendingFree = 0;
  Bytes freeInSplit = 0;
  Bytes freeWhole = 0;
  Bytes largestFree = 0;
  // 1 - largest free block / all free bytes: 0 when the free memory is one piece.
  double externalFragmentation = 0;
};

// PyTorch's small pool lives in 2 MiB segments (kSmallBuffer); everything else is large.
SegmentKind segmentKindOf(const storage::SegmentRange& segment);

std::vector<SegmentView> segmentViews(const storage::SegmentMap& map);
SegmentMapSummary summarize(const std::vector<SegmentView>& views);

// Where each piece goes on screen: segments are laid end to end in address order along rows of
// equal byte width that wrap, so every byte gets the same area and a 2 MiB segment is visibly
// 1/1000 of a 2 GiB one. A piece that wraps yields several rectangles.
struct PlacedPiece {
  QRectF rect;
  std::size_t segment = 0;  // index into the views
  std::size_t piece = 0;    // index into views[segment].pieces
};
struct SegmentLayout {
  std::vector<PlacedPiece> placed;
  struct Outline {
    QRectF rect;
    std::size_t segment = 0;
  };
  std::vector<Outline> segmentOutlines;  // one per segment and row it spans, drawn as frames
  double bytesPerPixel = 1;
  double rowHeight = 0;
  int rows = 0;
};
SegmentLayout layoutSegments(const std::vector<SegmentView>& views, QSizeF area);

}  // namespace fragscope::gui
