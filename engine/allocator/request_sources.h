#pragma once
// The forms run_requests (engine/allocator/run.h) reads a request stream in. Each has size(),
// largest_tensor(), pools() and for_each_block(visit): visit(block, index of its first request)
// for spans of requests in order, returning false to stop there. run_requests' loop is written
// once over them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/packed_requests.h"
#include "engine/core/request.h"

namespace fragscope::alloc::detail {

// A RequestStream: one block, the whole list.
class PlainRequests {
 public:
  explicit PlainRequests(const RequestStream& stream) : stream_(stream) {}
  std::size_t size() const { return stream_.requests.size(); }
  std::uint64_t largest_tensor() const {
    std::uint64_t largest = 0;
    for (const Request& r : stream_.requests)
      largest = std::max(largest, r.tensor.value);
    return largest;
  }
  const std::vector<RequestPool>& pools() const { return stream_.pools; }
  template <typename Visit>
  void for_each_block(Visit&& visit) const {
    visit(std::span<const Request>(stream_.requests), std::size_t{0});
  }

 private:
  const RequestStream& stream_;
};

// PackedRequests: decoded a block at a time.
class UnpackedBlocks {
 public:
  explicit UnpackedBlocks(const PackedRequests& packed) : packed_(packed) {}
  std::size_t size() const { return packed_.size(); }
  std::uint64_t largest_tensor() const { return packed_.largest_tensor(); }
  const std::vector<RequestPool>& pools() const { return packed_.pools; }
  template <typename Visit>
  void for_each_block(Visit&& visit) const {
    packed_.for_each_block(visit);
  }

 private:
  const PackedRequests& packed_;
};

// The request an inserted empty_cache call is.
inline constexpr Request kEmptyCacheRequest{RequestOp::empty_cache, TensorId{}, 0, StreamId{},
                                            LabelId{}};

// Another source (a view: it is kept by value) with empty_cache calls inserted, a what-if
// candidate's changed program: one before the request at each index of `before` (ascending;
// indices into `base`, base.size() for one after its last request). Its blocks are the base's
// cut at the calls, each call a block of its own, and its indices count the calls: the stream a
// copy with the calls in it would be, without the copy.
template <typename Base>
class WithEmptyCaches {
 public:
  WithEmptyCaches(Base base, std::span<const std::size_t> before) : base_(base), before_(before) {}
  std::size_t size() const { return base_.size() + before_.size(); }
  std::uint64_t largest_tensor() const { return base_.largest_tensor(); }
  const std::vector<RequestPool>& pools() const { return base_.pools(); }
  template <typename Visit>
  void for_each_block(Visit&& visit) const {
    std::size_t inserted = 0;  // calls visited so far: the shift of the base's indices
    bool go_on = true;
    // The calls due before base index `index`, each its own block.
    auto insert_before = [&](std::size_t index) {
      while (go_on && inserted < before_.size() && before_[inserted] <= index) {
        go_on = visit(std::span<const Request>(&kEmptyCacheRequest, 1), index + inserted);
        ++inserted;
      }
    };
    base_.for_each_block([&](std::span<const Request> block, std::size_t first) {
      std::size_t at = 0;  // the block's requests visited so far
      while (go_on && at < block.size()) {
        insert_before(first + at);
        if (!go_on)
          break;
        // Up to the next call inside the block, or its end.
        const std::size_t end =
            inserted < before_.size()
                ? std::clamp(before_[inserted], first + at + 1, first + block.size()) - first
                : block.size();
        go_on = visit(block.subspan(at, end - at), first + at + inserted);
        at = end;
      }
      return go_on;
    });
    insert_before(base_.size());
  }

 private:
  Base base_;
  std::span<const std::size_t> before_;
};

}  // namespace fragscope::alloc::detail
