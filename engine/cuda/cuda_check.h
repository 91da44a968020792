#pragma once
// Internal to engine/cuda: checks of CUDA runtime and driver results, and the driver API entry
// points (loaded through the runtime, so nothing links libcuda).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "engine/cuda/cuda_error.h"

namespace fragscope::cuda::detail {

// Throws CudaError "`what`: cudaErrorName (description)" unless status is cudaSuccess. Clears the
// runtime's sticky last error first, so a later call does not report this one again.
void check(cudaError_t status, std::string_view what);
void check(CUresult status, std::string_view what);
std::string describe(cudaError_t status);

// The driver calls FragScope uses, resolved once per process.
struct DriverApi {
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
};

// Throws CudaError when an entry point is missing (a driver older than CUDA 12).
const DriverApi& driver();

}  // namespace fragscope::cuda::detail
