#include "gui/segment_layout.h"

#include <algorithm>
#include <cmath>

#include "engine/snapshot/segment_state.h"

namespace fragscope::gui {

namespace {
constexpr Bytes kSmallSegmentBytes = 2 * kMiB;
// Pixels between two segments on a row, so neighbours read as separate boxes.
constexpr double kSegmentGap = 3;
constexpr double kRowGap = 4;
constexpr double kMinRowHeight = 10;
constexpr double kMaxRowHeight = 44;
// Placements tried before giving up on fitting every piece into the rows (each 6 % denser).
constexpr int kLayoutAttempts = 40;
}  // namespace

const char* pieceKindName(PieceKind kind) {
  switch (kind) {
    case PieceKind::allocated:
      return "allocated";
    case PieceKind::pendingFree:
      return "pending free";
    case PieceKind::freeInSplitSegment:
      return "free (split segment)";
    case PieceKind::freeWholeSegment:
      return "free (whole segment)";
  }
  return "?";
}

const char* segmentKindName(SegmentKind pool) {
  switch (pool) {
    case SegmentKind::small:
      return "small pool";
    case SegmentKind::large:
      return "large pool";
    case SegmentKind::expandable:
      return "expandable";
  }
  return "?";
}

SegmentKind segmentKindOf(const storage::SegmentRange& segment) {
  if (segment.expandable)
    return SegmentKind::expandable;
  return segment.size == kSmallSegmentBytes ? SegmentKind::small : SegmentKind::large;
}

std::vector<SegmentView> segmentViews(const storage::SegmentMap& map) {
  std::vector<SegmentView> views;
  views.reserve(map.segments().size());
  const auto& blocks = map.blocks();
  for (const auto& [base, segment] : map.segments()) {
    SegmentView view;
    view.segment = segment;
    view.pool = segmentKindOf(segment);
    const std::uint64_t end = base + segment.size;
    std::uint64_t cursor = base;
    std::vector<Piece> live;
    for (auto it = blocks.lower_bound(base); it != blocks.end() && it->first < end; ++it) {
      const storage::LiveBlock& block = it->second;
      const std::uint64_t blockEnd = std::min(end, block.addr + std::max<Bytes>(block.size, 1));
      live.push_back({block.addr, blockEnd - block.addr,
                      block.state == BlockState::active_pending_free ? PieceKind::pendingFree
                                                                     : PieceKind::allocated,
                      block.frames});
    }
    const PieceKind freeKind =
        live.empty() ? PieceKind::freeWholeSegment : PieceKind::freeInSplitSegment;
    for (const Piece& block : live) {
      if (block.addr > cursor)
        view.pieces.push_back({cursor, block.addr - cursor, freeKind, {}});
      // Blocks never overlap in a consistent trace; clip if a truncated one says otherwise.
      const std::uint64_t start = std::max(cursor, block.addr);
      const std::uint64_t blockEnd = block.addr + block.size;
      if (blockEnd > start) {
        Piece clipped = block;
        clipped.addr = start;
        clipped.size = blockEnd - start;
        view.pieces.push_back(clipped);
        view.liveBytes += clipped.size;
        cursor = blockEnd;
      }
    }
    if (cursor < end)
      view.pieces.push_back({cursor, end - cursor, freeKind, {}});
    for (const Piece& piece : view.pieces)
      if (piece.kind == PieceKind::freeInSplitSegment || piece.kind == PieceKind::freeWholeSegment)
        view.largestFree = std::max(view.largestFree, piece.size);
    views.push_back(std::move(view));
  }
  return views;
}

namespace {
// Bytes the allocator gave each live piece of `view` beyond its request (0 for free pieces).
std::vector<Bytes> roundingOf(const SegmentView& view, const snapshot::LayoutRules& rules) {
  std::vector<Bytes> rounding(view.pieces.size(), 0);
  const std::uint64_t end = view.segment.base + view.segment.size;
  for (std::size_t i = 0; i < view.pieces.size(); ++i) {
    const Piece& piece = view.pieces[i];
    if (piece.kind != PieceKind::allocated && piece.kind != PieceKind::pendingFree)
      continue;
    // The gap the block sits in: up to the next live piece, else the segment's end.
    std::uint64_t gapEnd = end;
    for (std::size_t j = i + 1; j < view.pieces.size(); ++j)
      if (view.pieces[j].kind == PieceKind::allocated ||
          view.pieces[j].kind == PieceKind::pendingFree) {
        gapEnd = view.pieces[j].addr;
        break;
      }
    const Bytes gap = gapEnd > piece.addr ? gapEnd - piece.addr : piece.size;
    const Bytes rounded = std::min(gap, rules.round_size(piece.size));
    const Bytes block = rules.should_split(gap, rounded) ? rounded : gap;
    rounding[i] = block > piece.size ? block - piece.size : 0;
  }
  return rounding;
}
}  // namespace

SegmentMapSummary summarize(const std::vector<SegmentView>& views,
                            const snapshot::LayoutRules* rules) {
  SegmentMapSummary summary;
  for (const SegmentView& view : views) {
    const bool expandable = view.pool == SegmentKind::expandable;
    (expandable ? summary.expandableRanges : summary.segments) += 1;
    summary.reserved += view.segment.size;
    const std::vector<Bytes> rounding =
        rules ? roundingOf(view, *rules) : std::vector<Bytes>(view.pieces.size(), 0);
    Bytes roundingBefore = 0;  // of the live piece just before, taken from the gap after it
    for (std::size_t i = 0; i < view.pieces.size(); ++i) {
      const Piece& piece = view.pieces[i];
      switch (piece.kind) {
        case PieceKind::allocated:
        case PieceKind::pendingFree:
          ++summary.blocks;
          summary.live += piece.size;
          if (piece.kind == PieceKind::pendingFree)
            summary.pendingFree += piece.size;
          roundingBefore = rounding[i];
          continue;
        case PieceKind::freeInSplitSegment:
        case PieceKind::freeWholeSegment: {
          const Bytes free = piece.size - std::min(piece.size, roundingBefore);
          if (expandable)
            summary.freeExpandable += free;
          else if (piece.kind == PieceKind::freeWholeSegment)
            summary.freeWhole += free;
          else
            summary.freeInSplit += free;
          summary.largestFree = std::max(summary.largestFree, free);
          break;
        }
      }
      roundingBefore = 0;
    }
  }
  const Bytes free = summary.freeBytes();
  if (free > 0)
    summary.externalFragmentation =
        1.0 - static_cast<double>(summary.largestFree) / static_cast<double>(free);
  return summary;
}

SegmentLayout layoutSegments(const std::vector<SegmentView>& views, QSizeF area) {
  SegmentLayout layout;
  if (views.empty() || area.width() < 10 || area.height() < 10)
    return layout;
  Bytes total = 0;
  for (const SegmentView& view : views)
    total += view.segment.size;
  const double width = area.width();
  // Pick the row count that fills the area best: rows * rowHeight ≈ height with the bytes
  // spread evenly; gaps between segments cost a little width on each row.
  const double gapsPerRow = std::min<double>(static_cast<double>(views.size()), 8.0);
  int rows = 1;
  for (int candidate = 1; candidate < 400; ++candidate) {
    const double rowHeight = (area.height() - kRowGap * (candidate - 1)) / candidate;
    if (rowHeight < kMinRowHeight)
      break;
    rows = candidate;
    // Aim for rows about as tall as a readable bar and not much taller.
    if (rowHeight <= kMaxRowHeight && candidate >= static_cast<int>(std::sqrt(views.size())))
      break;
  }
  layout.rows = rows;
  layout.rowHeight =
      std::min(kMaxRowHeight, (area.height() - kRowGap * (rows - 1)) / static_cast<double>(rows));
  const double usableWidth = std::max(1.0, width - gapsPerRow * kSegmentGap);
  const int rowsFit = rows;
  const SegmentLayout sized = layout;
  // Gaps between segments and the pixel every small block gets cost width the byte scale does
  // not know of: when the pieces run past the last row, shrink the scale and place them again.
  double bytesPerPixel = static_cast<double>(total) / (usableWidth * rows);
  for (int attempt = 0; attempt < kLayoutAttempts; ++attempt, bytesPerPixel *= 1.06) {
    layout = sized;
    layout.bytesPerPixel = bytesPerPixel;
    double x = 0;
    int row = 0;
    auto rowTop = [&](int r) { return r * (layout.rowHeight + kRowGap); };
    for (std::size_t s = 0; s < views.size(); ++s) {
      const SegmentView& view = views[s];
      if (x > 0 && x + kSegmentGap < width)
        x += kSegmentGap;
      if (x >= width - 1) {
        x = 0;
        ++row;
      }
      double outlineStart = x;
      for (std::size_t p = 0; p < view.pieces.size(); ++p) {
        // At least a pixel, so a small block never disappears.
        double remaining =
            std::max(1.0, static_cast<double>(view.pieces[p].size) / layout.bytesPerPixel);
        while (remaining > 0) {
          const double room = width - x;
          if (room < 0.5) {
            layout.segmentOutlines.push_back(
                {QRectF(outlineStart, rowTop(row), x - outlineStart, layout.rowHeight), s});
            x = 0;
            outlineStart = 0;
            ++row;
            continue;
          }
          const double take = std::min(room, remaining);
          layout.placed.push_back({QRectF(x, rowTop(row), take, layout.rowHeight), s, p});
          x += take;
          remaining -= take;
        }
      }
      layout.segmentOutlines.push_back(
          {QRectF(outlineStart, rowTop(row), x - outlineStart, layout.rowHeight), s});
    }
    layout.rows = row + 1;
    if (layout.rows <= rowsFit)
      break;
  }
  return layout;
}

}  // namespace fragscope::gui
