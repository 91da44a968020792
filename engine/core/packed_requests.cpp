#include "engine/core/packed_requests.h"

#include <algorithm>

#include "engine/core/varint.h"

namespace fragscope {

std::uint64_t PackedRequests::stream_slot(std::uint64_t stream) {
  for (std::size_t slot = 0; slot < streams_used_; ++slot) {
    if (streams_[slot] == stream)
      return last_slot_ = slot;
  }
  if (streams_used_ == kStreamSlots)
    return kStreamSlots;
  streams_[streams_used_] = stream;
  return last_slot_ = streams_used_++;
}

void PackedRequests::push_overflow(const Request& request) {
  words_.push_back(static_cast<std::uint64_t>(request.op) | kOverflow);
  overflow_.push_back(request);
}

void PackedRequests::decode(Cursor& cursor, std::span<Request> out) const {
  const std::uint64_t* word = words_.data() + cursor.word;
  std::size_t overflow = cursor.overflow;
  std::uint64_t largest = cursor.largest_tensor;
  // What a word's payload is, by its op bits (an op past the enum never comes: push_back wrote
  // the bits).
  static constexpr std::array<Payload, kOp + 1> kPayloadOf = [] {
    std::array<Payload, kOp + 1> table{};
    for (std::size_t op = 0; op <= kOp; ++op)
      table[op] = payload_of(static_cast<RequestOp>(op));
    return table;
  }();
  for (Request& request : out) {
    const std::uint64_t w = *word++;
    if ((w & kOverflow) != 0) [[unlikely]] {
      request = overflow_[overflow++];
    } else {
      const auto op = static_cast<RequestOp>(w & kOp);
      const Payload kind = kPayloadOf[w & kOp];
      const std::uint64_t payload = w >> kPayloadShift;
      const std::uint64_t next = largest + 1;
      const std::uint64_t given = next + static_cast<std::uint64_t>(unzigzag(payload));
      const std::uint64_t tensor = kind == Payload::size_of_next_tensor ? next
                                   : kind == Payload::tensor            ? given
                                                                        : 0;
      const Bytes size = kind == Payload::tensor ? 0 : payload;
      request = Request{op, TensorId{tensor}, size, StreamId{streams_[(w >> kSlotShift) & kSlot]}};
    }
    largest = std::max(largest, request.tensor.value);
  }
  cursor = Cursor{static_cast<std::size_t>(word - words_.data()), overflow, largest};
}

std::vector<Request> PackedRequests::to_vector() const {
  std::vector<Request> out;
  out.reserve(size());
  for_each_block([&out](std::span<const Request> block, std::size_t) {
    out.insert(out.end(), block.begin(), block.end());
    return true;
  });
  return out;
}

}  // namespace fragscope
