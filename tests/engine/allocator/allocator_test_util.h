#pragma once
// A caching allocator on a simulated H200 that checks every invariant after every call, and
// keeps the trace, so golden-vector tests read like the probe scripts of spec §15.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/allocator/caching_allocator.h"
#include "engine/core/devices.h"

namespace fragscope::alloc::test {

inline std::vector<std::pair<TraceAction, Bytes>> segment_events(
    const std::vector<TraceEvent>& events) {
  std::vector<std::pair<TraceAction, Bytes>> out;
  for (const TraceEvent& e : events) {
    if (e.action == TraceAction::segment_alloc || e.action == TraceAction::segment_free ||
        e.action == TraceAction::segment_map || e.action == TraceAction::segment_unmap)
      out.emplace_back(e.action, e.size);
  }
  return out;
}

class CheckedAllocator {
 public:
  explicit CheckedAllocator(AllocatorConfig config = {}, Bytes capacity = kH200TotalMemory)
      : device_(capacity, kH200TotalMemory), allocator_(std::move(config), device_, &trace_) {}

  std::uint64_t alloc(Bytes bytes, StreamId stream = StreamId{0}) {
    MallocResult result = allocator_.malloc(bytes, stream);
    EXPECT_TRUE(result.ok()) << "malloc(" << bytes
                             << ") failed: " << (result.oom ? result.oom->message : "");
    check();
    return result.address;
  }
  OutOfMemory alloc_fails(Bytes bytes, StreamId stream = StreamId{0}) {
    MallocResult result = allocator_.malloc(bytes, stream);
    EXPECT_FALSE(result.ok()) << "malloc(" << bytes << ") unexpectedly succeeded";
    check();
    return result.oom.value_or(OutOfMemory{});
  }
  void free(std::uint64_t address) {
    allocator_.free(address);
    check();
  }
  void empty_cache() {
    allocator_.empty_cache();
    check();
  }
  void check() const {
    std::string why;
    ASSERT_TRUE(allocator_.is_valid(&why)) << why;
  }

  // Bytes of a Stat, aggregate or per pool.
  std::int64_t current(const StatArray& stat, StatType type = StatType::aggregate) const {
    return stat[type].current;
  }

  CachingAllocator& allocator() { return allocator_; }
  const DeviceStats& stats() const { return allocator_.stats(); }
  SimulatedDevice& device() { return device_; }
  const std::vector<TraceEvent>& trace() const { return trace_.events(); }
  std::vector<std::pair<TraceAction, Bytes>> segment_events() const {
    return test::segment_events(trace_.events());
  }
  // Block size and requested size of the active block at `address`.
  BlockInfo block_at(std::uint64_t address) const {
    for (const SegmentInfo& segment : allocator_.snapshot())
      for (const BlockInfo& block : segment.blocks)
        if (block.address == address)
          return block;
    ADD_FAILURE() << "no block at " << address;
    return {};
  }
  // Base address of the segment holding `address`.
  std::uint64_t segment_of(std::uint64_t address) const {
    for (const SegmentInfo& segment : allocator_.snapshot())
      if (address >= segment.address && address < segment.address + segment.total_size)
        return segment.address;
    ADD_FAILURE() << "no segment holds " << address;
    return 0;
  }

 private:
  SimulatedDevice device_;
  TraceRecorder trace_;
  CachingAllocator allocator_;
};

}  // namespace fragscope::alloc::test
