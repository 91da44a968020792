#pragma once
// What a GPU run ran on: the device, its memory, the driver and runtime versions. Recorded with
// every real run so two runs can be told apart months later.
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "engine/core/units.h"

namespace fragscope::cuda {

struct GpuEnvironment {
  int device = 0;
  std::string name;                // cudaDeviceProp::name, e.g. "NVIDIA H200"
  Bytes total_memory = 0;          // totalGlobalMem
  Bytes free_memory_at_start = 0;  // cudaMemGetInfo free when queried
  std::string compute_capability;  // "9.0"
  int multiprocessors = 0;
  std::string uuid;  // GPU-xxxxxxxx-...
  std::string pci_bus_id;
  std::string driver_version;   // CUDA version the driver supports, e.g. "13.0"
  std::string driver_release;   // the kernel module's version, e.g. "580.159.04" ("" = unknown)
  std::string runtime_version;  // the CUDA runtime this binary carries
  bool virtual_memory_management = false;  // cuMemCreate/cuMemMap usable (expandable segments)
  Bytes vmm_granularity = 0;               // minimum cuMemCreate size
};

// nullopt when a GPU can be used; otherwise why not ("no CUDA driver", "no CUDA device", ...).
// Never throws, so callers can ask before doing anything else.
std::optional<std::string> gpu_unavailable_reason(int device = 0);

// Throws GpuUnavailable (with gpu_unavailable_reason) when there is no usable GPU.
GpuEnvironment query_environment(int device = 0);

// "13.0" for 13000, as nvidia-smi and torch.version.cuda print CUDA versions.
std::string cuda_version_string(int version);

nlohmann::json to_json(const GpuEnvironment& environment);

}  // namespace fragscope::cuda
