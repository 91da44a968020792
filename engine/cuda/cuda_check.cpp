#include "engine/cuda/cuda_check.h"

#include <mutex>

namespace fragscope::cuda::detail {

std::string describe(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

void check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess)
    return;
  cudaGetLastError();
  throw CudaError(std::string(what) + ": " + describe(status));
}

void check(CUresult status, std::string_view what) {
  if (status == CUDA_SUCCESS)
    return;
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& api = driver();
  api.get_error_name(status, &name);
  api.get_error_string(status, &text);
  throw CudaError(std::string(what) + ": " + (name ? name : "CUDA driver error") + " (" +
                  (text ? text : "no description") + ")");
}

namespace {

template <typename Fn>
void resolve(const char* symbol, Fn& target) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // Version 12000 asks for the ABI of each call as CUDA 12.0 defined it, which is what the
  // PFN_*_v10020 / _v6000 types above describe.
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &entry, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || entry == nullptr) {
    cudaGetLastError();
    throw CudaError(std::string("the CUDA driver has no entry point ") + symbol +
                    " (expandable segments need a driver for CUDA 12 or newer)");
  }
  target = reinterpret_cast<Fn>(entry);
}

DriverApi load_driver_api() {
  DriverApi api;
  resolve("cuGetErrorName", api.get_error_name);
  resolve("cuGetErrorString", api.get_error_string);
  resolve("cuDeviceGet", api.device_get);
  resolve("cuDeviceGetAttribute", api.device_get_attribute);
  resolve("cuMemAddressReserve", api.mem_address_reserve);
  resolve("cuMemAddressFree", api.mem_address_free);
  resolve("cuMemCreate", api.mem_create);
  resolve("cuMemRelease", api.mem_release);
  resolve("cuMemMap", api.mem_map);
  resolve("cuMemUnmap", api.mem_unmap);
  resolve("cuMemSetAccess", api.mem_set_access);
  resolve("cuMemGetAllocationGranularity", api.mem_get_allocation_granularity);
  return api;
}

}  // namespace

const DriverApi& driver() {
  static const DriverApi api = load_driver_api();
  return api;
}

}  // namespace fragscope::cuda::detail
