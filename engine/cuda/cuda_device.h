#pragma once
// The allocator model's Device on a real GPU: the caching allocator's segments are real
// cudaMalloc'd memory and, for expandable segments, real virtual-address reservations whose
// pages are backed with the driver's virtual memory management API (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), as PyTorch's
// ExpandableSegment does. Every call is timed.
//
// Pages: a reservation's alignment is its page size (PyTorch: 2 MiB for the small pool, 20 MiB
// for the large one), and map_pages backs each page with its own physical allocation, so any
// page-aligned sub-range can later be unmapped on its own, as PyTorch unmaps single pages.
//
// Out of memory: cudaMalloc's cudaErrorMemoryAllocation and cuMemCreate's
// CUDA_ERROR_OUT_OF_MEMORY are the "nullopt/false" answers of the Device contract; any other
// failure throws CudaError.
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "engine/allocator/device.h"
#include "engine/cuda/call_stats.h"

namespace fragscope::cuda {

struct CudaDeviceCallStats {
  CallStats cuda_malloc;
  CallStats cuda_free;
  CallStats address_reserve;  // cuMemAddressReserve
  CallStats address_free;     // cuMemAddressFree
  CallStats map;    // one map_pages call: cuMemCreate + cuMemMap + cuMemSetAccess per page
  CallStats unmap;  // one unmap_pages call: cuMemUnmap + cuMemRelease per page

  CallStats all() const;
};

nlohmann::json to_json(const CudaDeviceCallStats& stats);

class CudaDevice final : public alloc::Device {
 public:
  // Uses the current CUDA device (cudaSetDevice before constructing). Throws GpuUnavailable
  // when there is none.
  explicit CudaDevice(int device = 0);
  // Returns whatever is still allocated or mapped, so a failed run leaks nothing.
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  Bytes total_memory() const override { return total_memory_; }
  // cudaMemGetInfo free, asked each time (other processes change it).
  Bytes free_memory() const override;

  // Bytes this device currently holds for the allocator: cudaMalloc'd segments plus mapped
  // pages. The allocator model's reserved_bytes must equal this at every moment.
  Bytes bytes_in_use() const { return in_use_; }
  Bytes peak_bytes_in_use() const { return peak_in_use_; }
  const CudaDeviceCallStats& call_stats() const { return stats_; }

 private:
  struct Reservation {
    Bytes size = 0;
    Bytes page = 0;
    std::map<std::uint64_t, std::uint64_t> pages;  // mapped page address -> physical handle
  };

  std::optional<std::uint64_t> do_allocate_segment(Bytes bytes) override;
  void do_free_segment(std::uint64_t address, Bytes bytes) override;
  std::optional<std::uint64_t> do_reserve_address_space(Bytes bytes, Bytes alignment) override;
  void do_release_address_space(std::uint64_t address, Bytes bytes) override;
  bool do_map_pages(std::uint64_t address, Bytes bytes) override;
  void do_unmap_pages(std::uint64_t address, Bytes bytes) override;

  Reservation& reservation_of(std::uint64_t address, Bytes bytes, const char* what);
  // cuMemUnmap + cuMemRelease of one mapped page of `reservation`.
  void unmap_page(Reservation& reservation, std::uint64_t page_address);

  int device_ = 0;
  Bytes total_memory_ = 0;
  Bytes in_use_ = 0;
  Bytes peak_in_use_ = 0;
  std::map<std::uint64_t, Bytes> segments_;            // cudaMalloc'd: address -> size
  std::map<std::uint64_t, Reservation> reservations_;  // by base address
  CudaDeviceCallStats stats_;
};

}  // namespace fragscope::cuda
