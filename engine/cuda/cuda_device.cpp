#include "engine/cuda/cuda_device.h"

#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/hex.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/environment.h"

namespace fragscope::cuda {

CallStats CudaDeviceCallStats::all() const {
  CallStats sum;
  for (const CallStats* s :
       {&cuda_malloc, &cuda_free, &address_reserve, &address_free, &map, &unmap})
    sum += *s;
  return sum;
}

nlohmann::json to_json(const CudaDeviceCallStats& stats) {
  return {{"cudaMalloc", to_json(stats.cuda_malloc)},
          {"cudaFree", to_json(stats.cuda_free)},
          {"cuMemAddressReserve", to_json(stats.address_reserve)},
          {"cuMemAddressFree", to_json(stats.address_free)},
          {"map_pages", to_json(stats.map)},
          {"unmap_pages", to_json(stats.unmap)}};
}

namespace {

CUmemAllocationProp pinned_on(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

CudaDevice::CudaDevice(int device) : device_(device) {
  if (auto reason = gpu_unavailable_reason(device))
    throw GpuUnavailable(*reason);
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp props{};
  detail::check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
  total_memory_ = props.totalGlobalMem;
}

CudaDevice::~CudaDevice() {
  // Best effort: a destructor must not throw, and after a CUDA error the context may be gone.
  for (auto& [base, reservation] : reservations_) {
    for (auto& [page, handle] : reservation.pages) {
      detail::driver().mem_unmap(page, reservation.page);
      detail::driver().mem_release(handle);
    }
    detail::driver().mem_address_free(base, reservation.size);
  }
  for (const auto& [address, size] : segments_)
    cudaFree(reinterpret_cast<void*>(address));
  cudaGetLastError();
}

Bytes CudaDevice::free_memory() const {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  detail::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return free_bytes;
}

std::optional<std::uint64_t> CudaDevice::do_allocate_segment(Bytes bytes) {
  void* pointer = nullptr;
  const CallTimer timer;
  const cudaError_t status = cudaMalloc(&pointer, bytes);
  const std::int64_t ns = timer.elapsed_ns();
  stats_.cuda_malloc.add(ns);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ++stats_.cuda_malloc.failures;
    return std::nullopt;
  }
  detail::check(status, "cudaMalloc(" + std::to_string(bytes) + ")");
  const auto address = reinterpret_cast<std::uint64_t>(pointer);
  segments_.emplace(address, bytes);
  in_use_ += bytes;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return address;
}

void CudaDevice::do_free_segment(std::uint64_t address, Bytes bytes) {
  auto it = segments_.find(address);
  if (it == segments_.end() || it->second != bytes)
    throw CudaError("cudaFree(" + hex_address(address) + ", " + std::to_string(bytes) +
                    "): not a segment this device allocated with that size");
  const CallTimer timer;
  const cudaError_t status = cudaFree(reinterpret_cast<void*>(address));
  stats_.cuda_free.add(timer.elapsed_ns());
  detail::check(status, "cudaFree(" + hex_address(address) + ")");
  segments_.erase(it);
  in_use_ -= bytes;
}

std::optional<std::uint64_t> CudaDevice::do_reserve_address_space(Bytes bytes, Bytes alignment) {
  if (alignment == 0 || bytes % alignment != 0)
    throw CudaError("cuMemAddressReserve(" + std::to_string(bytes) + "): size is not a multiple " +
                    "of the page size " + std::to_string(alignment));
  CUdeviceptr base = 0;
  const CallTimer timer;
  // Alignment 0 = the allocation granularity, as PyTorch reserves; the driver refuses an
  // alignment that is not a power of two (20 MiB pages), and page addresses only need the base
  // to be granularity-aligned.
  const CUresult status = detail::driver().mem_address_reserve(&base, bytes, 0, 0, 0);
  stats_.address_reserve.add(timer.elapsed_ns());
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    ++stats_.address_reserve.failures;
    return std::nullopt;
  }
  detail::check(status, "cuMemAddressReserve(" + std::to_string(bytes) + ")");
  reservations_.emplace(base, Reservation{bytes, alignment, {}});
  return base;
}

void CudaDevice::do_release_address_space(std::uint64_t address, Bytes bytes) {
  auto it = reservations_.find(address);
  if (it == reservations_.end() || it->second.size != bytes)
    throw CudaError("cuMemAddressFree(" + hex_address(address) + ", " + std::to_string(bytes) +
                    "): not a reservation of this device with that size");
  if (!it->second.pages.empty())
    throw CudaError("cuMemAddressFree(" + hex_address(address) +
                    "): " + std::to_string(it->second.pages.size()) + " pages are still mapped");
  const CallTimer timer;
  const CUresult status = detail::driver().mem_address_free(address, bytes);
  stats_.address_free.add(timer.elapsed_ns());
  detail::check(status, "cuMemAddressFree(" + hex_address(address) + ")");
  reservations_.erase(it);
}

CudaDevice::Reservation& CudaDevice::reservation_of(std::uint64_t address, Bytes bytes,
                                                    const char* what) {
  auto it = reservations_.upper_bound(address);
  if (it != reservations_.begin()) {
    --it;
    Reservation& r = it->second;
    const std::uint64_t offset = address - it->first;
    if (offset + bytes <= r.size && offset % r.page == 0 && bytes % r.page == 0)
      return r;
  }
  throw CudaError(std::string(what) + "(" + hex_address(address) + ", " + std::to_string(bytes) +
                  "): not a page-aligned range inside a reservation of this device");
}

bool CudaDevice::do_map_pages(std::uint64_t address, Bytes bytes) {
  Reservation& r = reservation_of(address, bytes, "map_pages");
  const CUmemAllocationProp prop = pinned_on(device_);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const detail::DriverApi& api = detail::driver();
  const CallTimer timer;
  std::vector<std::uint64_t> mapped;
  for (std::uint64_t page = address; page < address + bytes; page += r.page) {
    if (r.pages.count(page) != 0)
      throw CudaError("map_pages(" + hex_address(address) + "): page " + hex_address(page) +
                      " is already mapped");
    CUmemGenericAllocationHandle handle = 0;
    const CUresult created = api.mem_create(&handle, r.page, &prop, 0);
    if (created == CUDA_ERROR_OUT_OF_MEMORY) {
      // Like PyTorch's ExpandableSegment::map: give back the pages this call created.
      for (std::uint64_t done : mapped)
        unmap_page(r, done);
      stats_.map.add(timer.elapsed_ns());
      ++stats_.map.failures;
      return false;
    }
    detail::check(created, "cuMemCreate(" + std::to_string(r.page) + ")");
    const CUresult mapped_status = api.mem_map(page, r.page, 0, handle, 0);
    if (mapped_status != CUDA_SUCCESS) {
      api.mem_release(handle);
      detail::check(mapped_status, "cuMemMap(" + hex_address(page) + ")");
    }
    r.pages.emplace(page, handle);
    mapped.push_back(page);
    in_use_ += r.page;
  }
  detail::check(api.mem_set_access(address, bytes, &access, 1),
                "cuMemSetAccess(" + hex_address(address) + ", " + std::to_string(bytes) + ")");
  stats_.map.add(timer.elapsed_ns());
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return true;
}

void CudaDevice::unmap_page(Reservation& r, std::uint64_t page_address) {
  auto it = r.pages.find(page_address);
  if (it == r.pages.end())
    throw CudaError("unmap_pages: page " + hex_address(page_address) + " is not mapped");
  const detail::DriverApi& api = detail::driver();
  detail::check(api.mem_unmap(page_address, r.page),
                "cuMemUnmap(" + hex_address(page_address) + ")");
  detail::check(api.mem_release(it->second), "cuMemRelease");
  r.pages.erase(it);
  in_use_ -= r.page;
}

void CudaDevice::do_unmap_pages(std::uint64_t address, Bytes bytes) {
  Reservation& r = reservation_of(address, bytes, "unmap_pages");
  // cuMemUnmap does not wait for kernels still using the pages (PyTorch synchronizes the
  // segment's stream first); a full device synchronization is the safe equivalent here.
  detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before cuMemUnmap");
  const CallTimer timer;
  for (std::uint64_t page = address; page < address + bytes; page += r.page)
    unmap_page(r, page);
  stats_.unmap.add(timer.elapsed_ns());
}

}  // namespace fragscope::cuda
