#include "gui/live_bands.h"

#include <algorithm>

namespace fragscope::gui {

LifetimeBuilder::LifetimeBuilder(LifetimeKind kind, const storage::SegmentMap& initial) {
  m_out.kind = kind;
  if (kind == LifetimeKind::allocations) {
    for (const auto& [addr, block] : initial.blocks())
      begin(Lifetime{.begin = 0,
                     .addr = addr,
                     .size = block.size,
                     .stream = block.stream,
                     .frames = block.frames});
  } else {
    for (const auto& [base, segment] : initial.segments())
      begin(Lifetime{.begin = 0,
                     .addr = base,
                     .size = segment.size,
                     .stream = segment.stream,
                     .expandable = segment.expandable});
  }
  m_out.totals.push_back(m_live);
}

void LifetimeBuilder::begin(const Lifetime& lifetime) {
  // A second lifetime at a live address means the trace lost the first one's end: end it here.
  endAt(lifetime.addr, lifetime.begin);
  Lifetime item = lifetime;
  item.end = 0;  // open; finish() closes what is still live
  if (item.frames.value != 0)
    m_out.hasStacks = true;
  m_open[item.addr] = m_out.items.size();
  m_out.items.push_back(item);
  m_live += item.size;
}

void LifetimeBuilder::endAt(std::uint64_t addr, std::uint64_t cursor) {
  const auto open = m_open.find(addr);
  if (open == m_open.end())
    return;  // ended before the trace began (a truncated trace): nothing to draw
  Lifetime& item = m_out.items[open->second];
  item.end = cursor;
  m_live -= item.size;
  m_open.erase(open);
}

void LifetimeBuilder::unmapRange(std::uint64_t addr, Bytes size, std::uint64_t cursor) {
  // Unmapping may cut a mapped range in two: the range ends, and what stays mapped of it on
  // either side goes on as new ranges.
  const std::uint64_t cutEnd = addr + static_cast<std::uint64_t>(size);
  auto it = m_open.upper_bound(addr);
  if (it != m_open.begin())
    --it;
  std::vector<Lifetime> rest;
  while (it != m_open.end() && it->first < cutEnd) {
    const Lifetime range = m_out.items[it->second];
    const std::uint64_t rangeEnd = range.addr + static_cast<std::uint64_t>(range.size);
    ++it;
    if (rangeEnd <= addr)
      continue;
    endAt(range.addr, cursor);
    if (range.addr < addr) {
      Lifetime left = range;
      left.begin = cursor;
      left.size = static_cast<Bytes>(addr - range.addr);
      rest.push_back(left);
    }
    if (rangeEnd > cutEnd) {
      Lifetime right = range;
      right.begin = cursor;
      right.addr = cutEnd;
      right.size = static_cast<Bytes>(rangeEnd - cutEnd);
      rest.push_back(right);
    }
    it = m_open.upper_bound(range.addr);
  }
  for (const Lifetime& part : rest)
    begin(part);
}

void LifetimeBuilder::add(std::span<const TraceEvent> events,
                          std::span<const Category> categories) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& event = events[i];
    const std::uint64_t cursor = ++m_next;
    const bool blocks = m_out.kind == LifetimeKind::allocations;
    switch (event.action) {
      case TraceAction::alloc:
        if (blocks) {
          const Category category = i < categories.size() ? categories[i] : Category::unknown;
          if (category != Category::unknown)
            m_out.labelled = true;
          begin(Lifetime{.begin = cursor,
                         .addr = event.addr,
                         .size = event.size,
                         .stream = event.stream,
                         .frames = event.frames,
                         .category = category});
        }
        break;
      case TraceAction::free_completed:
        if (blocks)
          endAt(event.addr, cursor);
        break;
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
        if (!blocks)
          begin(Lifetime{.begin = cursor,
                         .addr = event.addr,
                         .size = event.size,
                         .stream = event.stream,
                         .frames = event.frames,
                         .expandable = event.action == TraceAction::segment_map});
        break;
      case TraceAction::segment_free:
        if (!blocks)
          endAt(event.addr, cursor);
        break;
      case TraceAction::segment_unmap:
        if (!blocks)
          unmapRange(event.addr, event.size, cursor);
        break;
      case TraceAction::free_requested:
      case TraceAction::snapshot:
      case TraceAction::oom:
        break;
    }
    m_out.totals.push_back(m_live);
  }
}

Lifetimes LifetimeBuilder::finish() && {
  m_out.eventCount = m_next;
  for (const auto& [addr, index] : m_open)
    m_out.items[index].end = m_next + 1;
  m_open.clear();
  // Items were appended as they began, so they are already in stacking order.
  return std::move(m_out);
}

std::optional<std::size_t> BandRaster::itemAt(int x, int y) const {
  if (x < 0 || y < 0 || x >= width || y >= height)
    return std::nullopt;
  const std::uint32_t id = ids[static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                               static_cast<std::size_t>(x)];
  if (id == 0)
    return std::nullopt;
  return id - 1;
}

std::int64_t peakTotal(const Lifetimes& lifetimes, std::uint64_t first, std::uint64_t end) {
  end = std::min<std::uint64_t>(end, lifetimes.totals.size());
  std::int64_t peak = 0;
  for (std::uint64_t c = first; c < end; ++c)
    peak = std::max(peak, lifetimes.totals[c]);
  return peak;
}

BandRaster renderBands(const Lifetimes& lifetimes, std::uint64_t first, std::uint64_t end,
                       int width, int height, std::int64_t maxBytes, const CancelToken& cancel) {
  BandRaster raster;
  const std::uint64_t cursorEnd = lifetimes.totals.size();  // eventCount + 1
  first = std::min(first, cursorEnd);
  end = std::clamp(end, first, cursorEnd);
  raster.first = first;
  raster.end = end;
  raster.width = std::max(width, 0);
  raster.height = std::max(height, 0);
  if (raster.width == 0 || raster.height == 0 || end <= first)
    return raster;
  raster.maxBytes =
      maxBytes > 0 ? maxBytes : std::max<std::int64_t>(peakTotal(lifetimes, first, end), 1);
  raster.cursors.resize(static_cast<std::size_t>(raster.width));
  raster.ids.assign(
      static_cast<std::size_t>(raster.width) * static_cast<std::size_t>(raster.height), 0);
  const std::uint64_t span = end - first;
  const auto W = static_cast<std::uint64_t>(raster.width);
  const auto H = static_cast<std::int64_t>(raster.height);
  std::size_t next = 0;
  std::vector<std::uint32_t> live;
  for (int x = 0; x < raster.width; ++x) {
    if ((x & 63) == 0)
      cancel.throw_if_cancelled();
    // The column's cursors; the one with the highest total is drawn (peaks survive any zoom).
    const std::uint64_t c0 = first + span * static_cast<std::uint64_t>(x) / W;
    const std::uint64_t c1 =
        std::max(c0 + 1, first + span * (static_cast<std::uint64_t>(x) + 1) / W);
    std::uint64_t cursor = c0;
    for (std::uint64_t c = c0; c < std::min(c1, end); ++c)
      if (lifetimes.totals[c] > lifetimes.totals[cursor])
        cursor = c;
    raster.cursors[static_cast<std::size_t>(x)] = cursor;
    while (next < lifetimes.items.size() && lifetimes.items[next].begin <= cursor) {
      if (lifetimes.items[next].end > cursor)
        live.push_back(static_cast<std::uint32_t>(next));
      ++next;
    }
    // Drop what ended (cursors only grow, so it stays ended) while stacking the rest.
    std::size_t kept = 0;
    std::int64_t top = 0;
    std::int64_t row = 0;  // from the bottom
    for (const std::uint32_t index : live) {
      const Lifetime& item = lifetimes.items[index];
      if (item.end <= cursor)
        continue;
      live[kept++] = index;
      top += item.size;
      // A row belongs to the band that covers its middle.
      while (row < H && (2 * row + 1) * raster.maxBytes < 2 * top * H) {
        raster.ids[static_cast<std::size_t>(H - 1 - row) * W + static_cast<std::size_t>(x)] =
            index + 1;
        ++row;
      }
    }
    live.resize(kept);
  }
  return raster;
}

}  // namespace fragscope::gui
