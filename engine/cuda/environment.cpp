#include "engine/cuda/environment.h"

#include <dlfcn.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/cuda/cuda_check.h"

namespace fragscope::cuda {

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::optional<std::string> gpu_unavailable_reason(int device) {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    cudaGetLastError();
    return "no NVIDIA driver is installed (the CUDA driver library could not be loaded)";
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return "no usable CUDA device: " + detail::describe(status);
  }
  if (count == 0)
    return "no CUDA device found";
  if (device < 0 || device >= count)
    return "no CUDA device " + std::to_string(device) + " (found " + std::to_string(count) + ")";
  return std::nullopt;
}

namespace {

std::string uuid_text(const cudaUUID_t& uuid) {
  std::string text = "GPU-";
  static constexpr std::array<int, 4> kDashesAfter{3, 5, 7, 9};
  for (int i = 0; i < 16; ++i) {
    std::array<char, 3> hex{};
    std::snprintf(hex.data(), hex.size(), "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    text += hex.data();
    for (int after : kDashesAfter)
      if (i == after)
        text += '-';
  }
  return text;
}

// The driver's version from NVML, loaded at run time like the driver itself (nothing links it).
std::string nvml_driver_version() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr)
    return "";
  using Init = int (*)();
  using Version = int (*)(char*, unsigned int);
  auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
  auto version = reinterpret_cast<Version>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<Init>(dlsym(nvml, "nvmlShutdown"));
  std::array<char, 96> text{};
  if (init != nullptr && version != nullptr && init() == 0) {
    if (version(text.data(), static_cast<unsigned int>(text.size())) != 0)
      text[0] = '\0';
    if (shutdown != nullptr)
      shutdown();
  }
  dlclose(nvml);
  return text.data();
}

// "NVRM version: NVIDIA UNIX ... Kernel Module ... 580.159.04  ..." -> "580.159.04"; NVML
// where that file is not there (some virtual machines).
std::string driver_release() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(file, line))
    return nvml_driver_version();
  const auto module = line.find("Kernel Module");
  if (module == std::string::npos)
    return "";
  // The version is the first word that starts with a digit: "Kernel Module  580.159.04" and
  // "Open Kernel Module for x86_64  580.159.04" both occur.
  std::istringstream words(line.substr(module + 13));
  for (std::string word; words >> word;)
    if (std::isdigit(static_cast<unsigned char>(word[0])) && word.find('.') != std::string::npos)
      return word;
  return nvml_driver_version();
}

}  // namespace

GpuEnvironment query_environment(int device) {
  if (auto reason = gpu_unavailable_reason(device))
    throw GpuUnavailable(*reason);
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp props{};
  detail::check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
  GpuEnvironment env;
  env.device = device;
  env.name = props.name;
  env.total_memory = props.totalGlobalMem;
  env.compute_capability = std::to_string(props.major) + "." + std::to_string(props.minor);
  env.multiprocessors = props.multiProcessorCount;
  env.uuid = uuid_text(props.uuid);
  std::array<char, 32> bus{};
  if (cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device) == cudaSuccess)
    env.pci_bus_id = bus.data();
  int driver = 0;
  int runtime = 0;
  detail::check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  detail::check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  env.driver_version = cuda_version_string(driver);
  env.runtime_version = cuda_version_string(runtime);
  env.driver_release = driver_release();
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  detail::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  env.free_memory_at_start = free_bytes;
  CUdevice handle = 0;
  detail::check(detail::driver().device_get(&handle, device), "cuDeviceGet");
  int vmm = 0;
  detail::check(detail::driver().device_get_attribute(
                    &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, handle),
                "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
  env.virtual_memory_management = vmm != 0;
  if (env.virtual_memory_management) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    std::size_t granularity = 0;
    detail::check(detail::driver().mem_get_allocation_granularity(&granularity, &prop,
                                                                  CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                  "cuMemGetAllocationGranularity");
    env.vmm_granularity = granularity;
  }
  return env;
}

nlohmann::json to_json(const GpuEnvironment& env) {
  return {{"device", env.device},
          {"gpu_name", env.name},
          {"total_memory", env.total_memory},
          {"free_memory_at_start", env.free_memory_at_start},
          {"compute_capability", env.compute_capability},
          {"multiprocessors", env.multiprocessors},
          {"uuid", env.uuid},
          {"pci_bus_id", env.pci_bus_id},
          {"driver_cuda_version", env.driver_version},
          {"driver_release", env.driver_release},
          {"runtime_cuda_version", env.runtime_version},
          {"virtual_memory_management", env.virtual_memory_management},
          {"vmm_granularity", env.vmm_granularity}};
}

}  // namespace fragscope::cuda
