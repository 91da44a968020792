#pragma once
// PackedRequests: a request stream kept as one 64-bit word a request instead of 40-byte Requests,
// for the long streams a replay extracts from a recorded trace (the 1.2M entries of a generated
// 94 MB snapshot give 800k requests: 32 MB as Requests, 6.4 MB as words). Requests are appended
// in order and read back in order, a block of kBlockRequests at a time (run_requests runs one
// block while the rest stay packed).
//
// A word holds the op (bits 0-3), an overflow bit (4), the request's stream as a slot among the
// first kStreamSlots distinct streams the requests name (bits 5-7), and a 56-bit payload (8-63):
//   malloc:                             the size; the tensor is one past the largest id so far
//                                       (requests_from_trace numbers them so)
//   free, record_stream, events_ready:  the tensor as the zigzag difference from that next id;
//                                       the size is 0
//   any other op:                       the size (a step's index); the tensor is 0
// A request a word cannot hold (a label or pool, another tensor or size, a ninth stream, a
// payload of 2^56 or more) sets the overflow bit and is kept whole in a side list, read in order.
// Every word has the same length and no field depends on a branch, so reading one back is a
// load, a table lookup and a few selects.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/request.h"
#include "engine/core/varint.h"

namespace fragscope {

class PackedRequests {
 public:
  static constexpr std::size_t kBlockRequests = 4096;
  static constexpr std::size_t kStreamSlots = 8;

  // Inlined always: the extraction appends about a request an entry, and the call it was
  // otherwise (the extraction's loop is too large for the compiler to inline it) cost as much
  // as the packing.
  [[gnu::always_inline]] void push_back(const Request& request) {
    const std::uint64_t next = largest_tensor_ + 1;
    std::uint64_t payload = request.size;
    bool fits = request.label.value == 0 && request.pool == 0;
    switch (payload_of(request.op)) {
      case Payload::size_of_next_tensor:
        fits = fits && request.tensor.value == next;
        break;
      case Payload::tensor:
        fits = fits && request.size == 0;
        payload = zigzag(static_cast<std::int64_t>(request.tensor.value - next));
        break;
      case Payload::size:
        fits = fits && request.tensor.value == 0;
        break;
    }
    std::uint64_t slot = kStreamSlots;
    if (fits && payload < kPayloadLimit) [[likely]] {
      // Every slot taken is compared, without a branch on which one matches: requests of
      // several streams interleave, and guessing the previous request's slot mispredicted.
      // Only the taken slots: an unused one holds 0, which is a real stream id too.
      unsigned matches = 0;  // bit k: slot k holds the stream
      for (std::size_t k = 0; k < streams_used_; ++k)
        matches |= static_cast<unsigned>(streams_[k] == request.stream.value) << k;
      slot = matches != 0 ? static_cast<std::uint64_t>(std::countr_zero(matches))
                          : stream_slot(request.stream.value);
    }
    const auto op = static_cast<std::uint64_t>(request.op);
    if (slot < kStreamSlots) [[likely]]
      words_.push_back(op | slot << kSlotShift | payload << kPayloadShift);
    else
      push_overflow(request);
    if (request.tensor.value > largest_tensor_)
      largest_tensor_ = request.tensor.value;
  }
  // Room for `requests` words, as vector::reserve (the overflow list grows as it needs).
  void reserve(std::size_t requests) { words_.reserve(requests); }
  // Gives back the room no request took (a growth's slack: push_back doubles the capacity). It
  // copies the words: a stream kept long may call it, an extraction's reserve leaves it.
  void shrink_to_fit() {
    words_.shrink_to_fit();
    overflow_.shrink_to_fit();
  }
  std::size_t size() const { return words_.size(); }
  bool empty() const { return words_.empty(); }
  // The largest tensor id any request names (0 for none).
  std::uint64_t largest_tensor() const { return largest_tensor_; }
  // Calls visit(block, index of its first request) for each block of up to kBlockRequests
  // requests in order; visit returns false to stop there.
  template <typename Visit>
  void for_each_block(Visit&& visit) const {
    Cursor cursor;
    const std::size_t total = size();
    std::vector<Request> block(total < kBlockRequests ? total : kBlockRequests);
    for (std::size_t first = 0; first < total; first += kBlockRequests) {
      const std::size_t count = total - first < kBlockRequests ? total - first : kBlockRequests;
      decode(cursor, std::span<Request>(block.data(), count));
      if (!visit(std::span<const Request>(block.data(), count), first))
        return;
    }
  }
  std::vector<Request> to_vector() const;
  // Bytes held (the words and the overflow list).
  std::size_t memory_bytes() const {
    return words_.capacity() * sizeof(std::uint64_t) + overflow_.capacity() * sizeof(Request);
  }

  // The private pools the pool requests index, as RequestStream::pools.
  std::vector<RequestPool> pools;

 private:
  struct Cursor {
    std::size_t word = 0;
    std::size_t overflow = 0;
    std::uint64_t largest_tensor = 0;
  };
  // The next out.size() requests from `cursor`.
  void decode(Cursor& cursor, std::span<Request> out) const;
  // The word's fields (see above).
  static constexpr std::uint64_t kOp = 0x0f;
  static constexpr std::uint64_t kOverflow = 0x10;
  static constexpr int kSlotShift = 5;
  static constexpr std::uint64_t kSlot = 0x7;
  static constexpr int kPayloadShift = 8;
  static constexpr std::uint64_t kPayloadLimit = std::uint64_t{1} << (64 - kPayloadShift);
  static_assert(static_cast<std::uint64_t>(RequestOp::pool_empty_cache) <= kOp,
                "a request's op takes the word's low four bits");
  static_assert(kStreamSlots == kSlot + 1, "a stream slot takes three bits");

  // What a word's payload is for each op.
  enum class Payload : std::uint8_t {
    size_of_next_tensor,  // malloc
    tensor,               // the ops on an allocated tensor
    size,                 // the rest: no tensor
  };
  static constexpr Payload payload_of(RequestOp op) {
    switch (op) {
      case RequestOp::malloc:
        return Payload::size_of_next_tensor;
      case RequestOp::free:
      case RequestOp::record_stream:
      case RequestOp::events_ready:
        return Payload::tensor;
      default:
        return Payload::size;
    }
  }
  // A new slot for `stream`, which no slot holds; kStreamSlots when none is free.
  std::uint64_t stream_slot(std::uint64_t stream);
  // Appends `request` whole to the overflow list, its word marked so.
  void push_overflow(const Request& request);

  std::vector<std::uint64_t> words_;
  std::vector<Request> overflow_;
  std::array<std::uint64_t, kStreamSlots> streams_{};
  std::size_t streams_used_ = 0;
  std::uint64_t largest_tensor_ = 0;
};

}  // namespace fragscope
