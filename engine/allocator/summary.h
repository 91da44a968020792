#pragma once
// The texts PyTorch 2.11 shows users about allocator memory, byte for byte:
// torch.cuda.memory_summary() (torch-allocator-spec §9.4), the C++ format_size used in error
// messages (§6.1), the native allocator's OutOfMemoryError text (§6) and the cudaMallocAsync
// backend's (§12).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/allocator/stats.h"
#include "engine/core/units.h"

namespace fragscope::alloc {

// memory_summary(device, abbreviated): 77-character lines, ending in "|\n". Abbreviated leaves
// out the "from large pool" / "from small pool" rows.
std::string memory_summary(const DeviceStats& stats, int device, bool abbreviated);

// c10's format_size: "<n> bytes" up to 1024, then KiB / MiB / GiB with two decimals ("1024.00
// KiB" for 1 MiB; no TiB).
std::string format_size(Bytes size);

// One compute process on the GPU, as NVML lists it when the OOM text is built.
struct GpuProcessMemory {
  std::uint32_t pid = 0;
  Bytes used = 0;
  bool is_this_process = false;  // printed as "Including non-PyTorch memory, this process has..."
};

// What the native allocator's OOM text is built from. Sizes are bytes.
struct OomMessageInputs {
  int device = 0;
  Bytes tried_to_allocate =
      0;                     // the segment size alloc_block would have asked for (not the request)
  Bytes total_capacity = 0;  // cudaMemGetInfo total
  Bytes device_free = 0;     // cudaMemGetInfo free (the trace's oom entry `device_free`)
  std::vector<GpuProcessMemory> processes;  // NVML order; empty when NVML is unavailable
  std::optional<Bytes> allowed;             // set when a memory-fraction limit is active
  Bytes allocated = 0;                      // allocated_bytes.all.current
  Bytes reserved = 0;                       // reserved_bytes.all.current
  Bytes private_pool_free = 0;  // free cached bytes in private pools ("allocated in private pools")
};

// The message of torch.OutOfMemoryError (one line). Like PyTorch's size_t arithmetic, "reserved
// but unallocated" wraps if reserved < allocated + private_pool_free.
std::string oom_message(const OomMessageInputs& inputs);
// The OOM message's "Process N has X memory in use. " sentences (every release's text has them).
std::string process_memory_text(const OomMessageInputs& inputs);

// allocate() with a size of 2^60 bytes or more fails with this before anything else.
inline constexpr std::string_view kOomMoreThan1EB =
    "CUDA out of memory. Tried to allocate more than 1EB memory.";

// What the cudaMallocAsync backend's over-limit text is built from (§12).
struct AsyncOomMessageInputs {
  int device = 0;
  Bytes currently_allocated = 0;  // PyTorch's own running byte count
  Bytes requested = 0;
  Bytes device_total = 0;
  Bytes device_free = 0;
  Bytes pytorch_limit = 0;  // fraction x total
};

// The multi-line cudaMallocAsync OutOfMemoryError message.
std::string async_oom_message(const AsyncOomMessageInputs& inputs);

}  // namespace fragscope::alloc
