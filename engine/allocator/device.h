#pragma once
// Where segment memory comes from (RMM's "upstream resource" idea): the caching allocator asks a
// Device for cudaMalloc'd segments and, for expandable segments, for virtual address space and
// page mappings. Devices compose: RecordedAddressDevice serves the addresses a real PyTorch run
// got, over a SimulatedDevice that does the capacity accounting.
//
// The public calls are non-virtual (NVI) so the base counts every device call in one place,
// whatever the implementation.
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "engine/core/units.h"

namespace fragscope::alloc {

// How often the allocator called the device; `run_requests` reports these.
struct DeviceCallCounts {
  std::uint64_t segment_allocs = 0;          // successful cudaMalloc
  std::uint64_t segment_alloc_failures = 0;  // cudaMalloc that reported out of memory
  std::uint64_t segment_frees = 0;           // cudaFree
  std::uint64_t reserves = 0;                // cuMemAddressReserve
  std::uint64_t releases = 0;                // cuMemAddressFree
  std::uint64_t maps = 0;                    // successful page-range maps
  std::uint64_t map_failures = 0;            // maps that reported out of memory
  std::uint64_t unmaps = 0;                  // page-range unmaps
  friend bool operator==(const DeviceCallCounts&, const DeviceCallCounts&) = default;
  // The calls made between two readings of Device::calls(), `before` taken first.
  friend DeviceCallCounts operator-(const DeviceCallCounts& after, const DeviceCallCounts& before) {
    return {after.segment_allocs - before.segment_allocs,
            after.segment_alloc_failures - before.segment_alloc_failures,
            after.segment_frees - before.segment_frees,
            after.reserves - before.reserves,
            after.releases - before.releases,
            after.maps - before.maps,
            after.map_failures - before.map_failures,
            after.unmaps - before.unmaps};
  }
};

class Device {
 public:
  virtual ~Device() = default;

  // cudaMalloc(bytes): the segment's base address, or nullopt when the device is out of memory.
  std::optional<std::uint64_t> allocate_segment(Bytes bytes);
  // cudaFree of a segment allocate_segment returned, with its size.
  void free_segment(std::uint64_t address, Bytes bytes);

  // Expandable segments. A reservation is virtual address space with no memory behind it;
  // `bytes` is a multiple of `alignment` (the page size). nullopt = no address space left.
  std::optional<std::uint64_t> reserve_address_space(Bytes bytes, Bytes alignment);
  void release_address_space(std::uint64_t address, Bytes bytes);
  // Backs [address, address + bytes) inside a reservation with memory; false = out of memory
  // (nothing stays mapped then, as PyTorch releases the pages it created in that call).
  bool map_pages(std::uint64_t address, Bytes bytes);
  void unmap_pages(std::uint64_t address, Bytes bytes);

  // totalGlobalMem / cudaMemGetInfo total: the "total capacity" of the OOM text.
  virtual Bytes total_memory() const = 0;
  // cudaMemGetInfo free: the "of which ... is free" of the OOM text and the trace's oom entry.
  virtual Bytes free_memory() const = 0;
  // NVML's memory in use by this process (the OOM text's "Including non-PyTorch memory, this
  // process has X memory in use."); nullopt when unknown, and the sentence is left out.
  virtual std::optional<Bytes> process_memory_in_use() const { return std::nullopt; }

  const DeviceCallCounts& calls() const { return calls_; }

  // The CUDA device index: "GPU d" in the OOM text. A replay of device d's trace sets it on the
  // device the allocator is given.
  int ordinal() const { return ordinal_; }
  void set_ordinal(int ordinal) { ordinal_ = ordinal; }

 private:
  virtual std::optional<std::uint64_t> do_allocate_segment(Bytes bytes) = 0;
  virtual void do_free_segment(std::uint64_t address, Bytes bytes) = 0;
  virtual std::optional<std::uint64_t> do_reserve_address_space(Bytes bytes, Bytes alignment) = 0;
  virtual void do_release_address_space(std::uint64_t address, Bytes bytes) = 0;
  virtual bool do_map_pages(std::uint64_t address, Bytes bytes) = 0;
  virtual void do_unmap_pages(std::uint64_t address, Bytes bytes) = 0;

  DeviceCallCounts calls_;
  int ordinal_ = 0;
};

// A GPU of fixed capacity with deterministic addresses.
//
// Memory: cudaMalloc'd segments and mapped pages both count against `capacity`; a request that
// would exceed it fails like a real out-of-memory. free_memory() = capacity - in use.
//
// Addresses (documented because best fit breaks size ties by address, so they steer decisions):
// - segments: top down below kSegmentBase in 2 MiB granules, as cudaMalloc hands them out (the
//   real recordings' segment addresses decrease); a freed range coalesces with free neighbours
//   and is reused, highest address first, from its top. (Ascending addresses made the workload
//   calibration drift by up to 4.7% reserved on held-out recordings whose streams were exact.)
// - reservations: bump-allocated upward from kReserveBase, aligned to the page size, never reused
//   (a released range is simply gone), far away from the segment range.
class SimulatedDevice final : public Device {
 public:
  static constexpr std::uint64_t kSegmentBase = std::uint64_t{1} << 40;  // 1 TiB
  static constexpr std::uint64_t kReserveBase = std::uint64_t{1} << 46;  // 64 TiB
  static constexpr Bytes kGranule = 2 * kMiB;

  // `capacity`: bytes available to the allocator. `total_memory`: what totalGlobalMem reports
  // (0 = same as capacity); PyTorch sizes expandable reservations and memory fractions from it.
  explicit SimulatedDevice(Bytes capacity, Bytes total_memory = 0);

  Bytes capacity() const { return capacity_; }
  Bytes in_use() const { return in_use_; }
  Bytes total_memory() const override { return total_memory_; }
  Bytes free_memory() const override { return capacity_ - in_use_; }
  std::optional<Bytes> process_memory_in_use() const override { return process_memory_; }
  // Sets what process_memory_in_use() reports (NVML is not simulated).
  void set_process_memory_in_use(std::optional<Bytes> bytes) { process_memory_ = bytes; }

 private:
  std::optional<std::uint64_t> do_allocate_segment(Bytes bytes) override;
  void do_free_segment(std::uint64_t address, Bytes bytes) override;
  std::optional<std::uint64_t> do_reserve_address_space(Bytes bytes, Bytes alignment) override;
  void do_release_address_space(std::uint64_t address, Bytes bytes) override;
  bool do_map_pages(std::uint64_t address, Bytes bytes) override;
  void do_unmap_pages(std::uint64_t address, Bytes bytes) override;

  Bytes capacity_;
  Bytes total_memory_;
  Bytes in_use_ = 0;
  std::optional<Bytes> process_memory_;
  std::map<std::uint64_t, Bytes> free_ranges_;   // segment address space: start -> length
  std::uint64_t segment_bottom_ = kSegmentBase;  // lowest address handed out so far
  std::uint64_t reserve_top_ = kReserveBase;
};

// Serves the segment base addresses a recorded PyTorch run got from cudaMalloc, in order, so a
// replay breaks best-fit ties exactly as the real run did. Capacity and expandable-segment
// address space come from `upstream`. As long as each request has the size the recording has
// next, the recorded address is returned; from the first mismatch on (the model diverged, or a
// what-if changed the sizes) it returns upstream's own addresses and diverged() is true.
class RecordedAddressDevice final : public Device {
 public:
  struct RecordedSegment {
    std::uint64_t address = 0;
    Bytes size = 0;
  };

  RecordedAddressDevice(std::vector<RecordedSegment> segments, Device& upstream);

  bool diverged() const { return diverged_; }
  // cudaMemGetInfo free as the recording's oom entries hold it, in order. The allocator asks
  // once per OOM (as PyTorch calls cudaMemGetInfo once), so each free_memory() call returns the
  // next recorded value; when they are used up, upstream's value.
  void set_free_memory_at_ooms(std::vector<Bytes> values) {
    free_at_ooms_ = std::move(values);
    next_free_ = 0;
  }
  void set_process_memory_in_use(std::optional<Bytes> bytes) { process_memory_ = bytes; }

  Bytes total_memory() const override { return upstream_.total_memory(); }
  Bytes free_memory() const override;
  std::optional<Bytes> process_memory_in_use() const override;

 private:
  std::optional<std::uint64_t> do_allocate_segment(Bytes bytes) override;
  void do_free_segment(std::uint64_t address, Bytes bytes) override;
  std::optional<std::uint64_t> do_reserve_address_space(Bytes bytes, Bytes alignment) override;
  void do_release_address_space(std::uint64_t address, Bytes bytes) override;
  bool do_map_pages(std::uint64_t address, Bytes bytes) override;
  void do_unmap_pages(std::uint64_t address, Bytes bytes) override;

  std::vector<RecordedSegment> segments_;
  std::size_t next_ = 0;
  bool diverged_ = false;
  Device& upstream_;
  std::map<std::uint64_t, std::uint64_t> upstream_address_;  // address we returned -> upstream's
  std::vector<Bytes> free_at_ooms_;
  mutable std::size_t next_free_ = 0;
  std::optional<Bytes> process_memory_;
};

// The device stack a recording's requests run on (a replay, a what-if row, the pool inference):
// a SimulatedDevice of `capacity` bytes that reports `total_memory` (0 = capacity) as
// totalGlobalMem, under a RecordedAddressDevice that serves `segments`, the recording's cudaMalloc
// addresses in order, and is the device the allocator is given. Like RMM's `make_pool`, the one
// place this stack is composed. It owns both layers and cannot move (the adaptor holds its
// upstream by reference), so it is built where it is used.
class ReplayDevice final {
 public:
  ReplayDevice(std::vector<RecordedAddressDevice::RecordedSegment> segments, Bytes capacity,
               Bytes total_memory = 0, int ordinal = 0);
  ReplayDevice(const ReplayDevice&) = delete;
  ReplayDevice& operator=(const ReplayDevice&) = delete;

  RecordedAddressDevice& device() { return recorded_; }
  const RecordedAddressDevice& device() const { return recorded_; }
  const SimulatedDevice& simulated() const { return simulated_; }

 private:
  SimulatedDevice simulated_;
  RecordedAddressDevice recorded_;  // over simulated_, so declared after it
};

}  // namespace fragscope::alloc
