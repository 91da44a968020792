#include "engine/snapshot/event_spool.h"

#include <stdexcept>
#include <string>

namespace fragscope::snapshot {
namespace {

void put_varint(std::vector<std::uint8_t>& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(value));
}

// The difference b - a modulo 2^64, folded so that small steps either way take few bytes.
std::uint64_t zigzag_delta(std::uint64_t a, std::uint64_t b) {
  const auto delta = static_cast<std::int64_t>(b - a);
  return (static_cast<std::uint64_t>(delta) << 1) ^ static_cast<std::uint64_t>(delta >> 63);
}

std::uint64_t unzigzag(std::uint64_t value) {
  return (value >> 1) ^ (~(value & 1) + 1);
}

std::uint64_t get_varint(const std::uint8_t*& at) {
  std::uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    const std::uint8_t byte = *at++;
    value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0)
      return value;
  }
}

}  // namespace

void EventSpool::push_back(const TraceEvent& event) {
  if (tail_.empty())
    tail_.reserve(kBlockEvents);
  tail_.push_back(event);
  if (tail_.size() == kBlockEvents)
    pack_tail();
}

void EventSpool::pack_tail() {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(tail_.size() * 12);
  TraceEvent previous;
  for (const TraceEvent& event : tail_) {
    bytes.push_back(static_cast<std::uint8_t>(event.action));
    put_varint(bytes, zigzag_delta(previous.addr, event.addr));
    put_varint(bytes, event.size);
    put_varint(bytes, zigzag_delta(previous.stream.value, event.stream.value));
    put_varint(bytes, zigzag_delta(static_cast<std::uint64_t>(previous.time_us),
                                   static_cast<std::uint64_t>(event.time_us)));
    put_varint(bytes, event.frames.value);
    previous = event;
  }
  // Each block its own allocation of its own size: one growing buffer would hold up to twice
  // the bytes, and copy them all at every growth.
  bytes.shrink_to_fit();
  blocks_.push_back(std::move(bytes));
  packed_events_ += tail_.size();
  tail_.clear();  // keeps its capacity for the next block
}

std::span<const TraceEvent> EventSpool::block(std::size_t b,
                                              std::vector<TraceEvent>& scratch) const {
  if (b == blocks_.size())
    return tail_;
  scratch.resize(kBlockEvents);
  const std::uint8_t* at = blocks_[b].data();
  TraceEvent previous;
  for (TraceEvent& event : scratch) {
    event.action = static_cast<TraceAction>(*at++);
    event.addr = previous.addr + unzigzag(get_varint(at));
    event.size = get_varint(at);
    event.stream = StreamId{previous.stream.value + unzigzag(get_varint(at))};
    event.time_us = static_cast<std::int64_t>(static_cast<std::uint64_t>(previous.time_us) +
                                              unzigzag(get_varint(at)));
    event.frames = FrameStackId{static_cast<std::uint32_t>(get_varint(at))};
    previous = event;
  }
  return scratch;
}

TraceEvent EventSpool::at(std::size_t index) const {
  if (index >= size())
    throw std::out_of_range("EventSpool::at: event " + std::to_string(index) + " of " +
                            std::to_string(size()));
  std::vector<TraceEvent> scratch;
  return block(index / kBlockEvents, scratch)[index % kBlockEvents];
}

std::size_t EventSpool::memory_bytes() const {
  std::size_t bytes = blocks_.capacity() * sizeof(std::vector<std::uint8_t>) +
                      tail_.capacity() * sizeof(TraceEvent);
  for (const auto& block : blocks_)
    bytes += block.capacity();
  return bytes;
}

std::vector<TraceEvent> EventSpool::to_vector() const {
  std::vector<TraceEvent> out;
  out.reserve(size());
  for_each_block(false, [&out](std::span<const TraceEvent> block, std::size_t) {
    out.insert(out.end(), block.begin(), block.end());
  });
  return out;
}

}  // namespace fragscope::snapshot
