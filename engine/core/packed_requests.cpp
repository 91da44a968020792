#include "engine/core/packed_requests.h"

#include <algorithm>

#include "engine/core/varint.h"

namespace fragscope {

std::uint64_t PackedRequests::stream_slot(std::uint64_t stream) {
  if (streams_used_ == kStreamSlots)
    return kStreamSlots;
  streams_[streams_used_] = stream;
  return streams_used_++;
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
  // Which of next, given and payload a word's op keeps, as all-ones or zero masks: the fields
  // are selected without a branch, which the ops' mix (malloc, free, ...) would mispredict.
  struct Masks {
    std::uint64_t next;
    std::uint64_t given;
    std::uint64_t size;
  };
  static constexpr std::array<Masks, kOp + 1> kMasksOf = [] {
    std::array<Masks, kOp + 1> table{};
    for (std::size_t op = 0; op <= kOp; ++op) {
      const Payload kind = kPayloadOf[op];
      table[op] = Masks{kind == Payload::size_of_next_tensor ? ~std::uint64_t{0} : 0,
                        kind == Payload::tensor ? ~std::uint64_t{0} : 0,
                        kind == Payload::tensor ? 0 : ~std::uint64_t{0}};
    }
    return table;
  }();
  for (Request& request : out) {
    const std::uint64_t w = *word++;
    if ((w & kOverflow) != 0) [[unlikely]] {
      request = overflow_[overflow++];
    } else {
      const auto op = static_cast<RequestOp>(w & kOp);
      const Masks& masks = kMasksOf[w & kOp];
      const std::uint64_t payload = w >> kPayloadShift;
      const std::uint64_t next = largest + 1;
      const std::uint64_t given = next + static_cast<std::uint64_t>(unzigzag(payload));
      const std::uint64_t tensor = (next & masks.next) | (given & masks.given);
      const Bytes size = payload & masks.size;
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
