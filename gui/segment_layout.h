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

namespace fragscope::snapshot {
struct LayoutRules;
}

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

// The state's figures as PyTorch's memory_stats() names them where it has them ("all" pools).
struct SegmentMapSummary {
  std::size_t segments = 0;          // segment: cudaMalloc'd segments (not expandable ones)
  std::size_t expandableRanges = 0;  // mapped ranges of expandable segments
  std::size_t blocks = 0;            // active: allocated + pending free
  Bytes reserved = 0;                // reserved_bytes
  Bytes live = 0;                    // requested_bytes: allocated + pending free, request sizes
  Bytes pendingFree = 0;
  // Free blocks, by the block sizes the allocator gave the live ones (summarize's `rules`):
  Bytes freeInSplit = 0;     // inactive_split_bytes: in cudaMalloc'd segments with a live block
  Bytes freeExpandable = 0;  // mapped and free in expandable segments
  Bytes freeWhole = 0;       // cudaMalloc'd segments without a live block (empty_cache frees them)
  Bytes largestFree = 0;
  // 1 - largest free block / all free bytes: 0 when the free memory is one piece.
  double externalFragmentation = 0;
  Bytes freeBytes() const { return freeInSplit + freeExpandable + freeWhole; }
};

// PyTorch's small pool lives in 2 MiB segments (kSmallBuffer); everything else is large.
SegmentKind segmentKindOf(const storage::SegmentRange& segment);

std::vector<SegmentView> segmentViews(const storage::SegmentMap& map);
// A trace records request sizes only, so a live piece ends where its request does. With `rules`
// (the run's allocator config) each live block is given the size PyTorch's allocator gave it:
// the request rounded, or the whole gap up to the next live block when the rest was too small
// to split; the free figures are then PyTorch's (the rounding is not free memory). Without
// rules, the gaps between requests count as free.
SegmentMapSummary summarize(const std::vector<SegmentView>& views,
                            const snapshot::LayoutRules* rules = nullptr);

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
