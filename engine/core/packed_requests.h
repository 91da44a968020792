#pragma once
// PackedRequests: a request stream kept as packed bytes instead of 40-byte Requests, for the long
// streams a replay extracts from a recorded trace (the 1.2M entries of a generated 94 MB snapshot
// give 800k requests: 32 MB as Requests, a 4.9 MB buffer packed). Requests are appended in order
// and read back in order, a block of kBlockRequests at a time (run_requests runs one block while
// the rest stay packed).
//
// A request is a head byte, its op in the low four bits and which fields follow as varints
// (engine/core/varint.h) in the high four; an absent field takes the value most requests have:
//   kTensor: the tensor id, as the zigzag difference from one past the largest id so far.
//            Absent: a malloc's tensor is that next id (requests_from_trace numbers them so),
//            any other op's is 0 (empty_cache, markers, pool requests).
//   kSize:   the size; absent: 0.
//   kStream: the stream; absent: the previous request's (0 before the first).
//   kExtra:  the label, then the pool index; absent: both 0.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/request.h"

namespace fragscope {

class PackedRequests {
 public:
  static constexpr std::size_t kBlockRequests = 4096;

  void push_back(const Request& request);
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The largest tensor id any request names (0 for none).
  std::uint64_t largest_tensor() const { return largest_tensor_; }
  // Calls visit(block, index of its first request) for each block of up to kBlockRequests
  // requests in order; visit returns false to stop there.
  template <typename Visit>
  void for_each_block(Visit&& visit) const {
    Cursor cursor{bytes_.data()};
    std::vector<Request> block(size_ < kBlockRequests ? size_ : kBlockRequests);
    for (std::size_t first = 0; first < size_; first += kBlockRequests) {
      const std::size_t count = size_ - first < kBlockRequests ? size_ - first : kBlockRequests;
      decode(cursor, std::span<Request>(block.data(), count));
      if (!visit(std::span<const Request>(block.data(), count), first))
        return;
    }
  }
  std::vector<Request> to_vector() const;
  // Bytes held (the packed requests' buffer).
  std::size_t memory_bytes() const { return bytes_.capacity(); }

  // The private pools the pool requests index, as RequestStream::pools.
  std::vector<RequestPool> pools;

 private:
  struct Cursor {
    const std::uint8_t* at = nullptr;
    std::uint64_t largest_tensor = 0;
    std::uint64_t stream = 0;
  };
  // The next out.size() requests from `cursor`.
  void decode(Cursor& cursor, std::span<Request> out) const;

  std::vector<std::uint8_t> bytes_;
  std::size_t size_ = 0;
  std::uint64_t largest_tensor_ = 0;
  std::uint64_t stream_ = 0;  // the last request's
};

}  // namespace fragscope
