#pragma once
// Runs a fragscope::RequestStream on a real GPU under one of three allocators and measures it:
//
//   model           the caching-allocator model (engine/allocator) over CudaDevice: segments are
//                   real cudaMalloc'd memory or, with expandable_segments, real mapped pages
//   cudaMalloc      no cache at all: one cudaMalloc per tensor, cudaFree when it dies
//   cudaMallocAsync CUDA's stream-ordered pool (cudaMallocAsync/cudaFreeAsync on the default
//                   pool, release threshold UINT64_MAX, as PyTorch's cudaMallocAsync backend sets)
//
// Every allocation is touched with cudaMemsetAsync on its stream, so the memory is really used,
// not just reserved. Each allocator call and each device call is timed with the host clock (they
// block the caller); each training step (step_begin marker to the next) is timed with the host
// clock and with CUDA events on the main stream, after a device synchronization at the step's
// end, so the step's GPU work is inside its time.
//
// Memory limit: the model applies `capacity` as PyTorch's per-process limit
// (set_allowed_memory). CUDA has no such limit for plain cudaMalloc or the async pool, so for
// those two a request that would take the requested bytes of live tensors above `capacity` is
// refused as an out-of-memory, which is the best a cache-less allocator can do with a limit.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/allocator/config.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/stats.h"
#include "engine/core/request.h"
#include "engine/cuda/call_stats.h"
#include "engine/cuda/environment.h"

namespace fragscope::cuda {

enum class GpuAllocator : std::uint8_t { model, cuda_malloc, cuda_malloc_async };
// "model", "cudaMalloc", "cudaMallocAsync" (the CLI's --allocator values).
std::string_view to_string(GpuAllocator allocator);
std::optional<GpuAllocator> gpu_allocator_from_string(std::string_view name);

struct GpuRunOptions {
  GpuAllocator allocator = GpuAllocator::model;
  alloc::AllocatorConfig config;  // the model's PYTORCH_CUDA_ALLOC_CONF
  std::optional<Bytes> capacity;  // bytes the allocator may hold; nullopt = the whole GPU
  bool touch = true;              // cudaMemsetAsync every allocation
  // empty_cache() at the end of every step (each step_begin marker opens one) (cudaMallocAsync:
  // synchronize + cudaMemPoolTrimTo 0; cudaMalloc has nothing cached), timed, to measure what
  // calling it every step costs.
  bool empty_cache_every_step = false;
  int device = 0;
  // The model only: receives every decision as a TraceEvent (for storing the run); may be null.
  alloc::EventSink* sink = nullptr;
};

struct GpuOom {
  std::size_t request_index = 0;
  Bytes size = 0;  // the unrounded request
  std::string message;
};

struct StepRecord {
  std::int64_t step = -1;  // the step_begin marker's index; -1 = before the first marker
  std::size_t first_request = 0;
  double host_ms = 0;         // wall time, including a device synchronization at the end
  double gpu_ms = 0;          // CUDA events on the main stream
  CallStats allocator_calls;  // malloc + free calls into the allocator in this step
  CallStats device_calls;     // calls the allocator made on the device in this step
  Bytes allocated = 0;        // at the end of the step
  Bytes reserved = 0;
  Bytes device_used = 0;  // cudaMemGetInfo: free at the start of the run - free now
  std::optional<double> empty_cache_ms;
  Bytes reserved_after_empty_cache = 0;
};

struct GpuRunResult {
  GpuAllocator allocator = GpuAllocator::model;
  GpuEnvironment environment;
  std::optional<GpuOom> oom;  // the run stops at the first OOM, as a training script would
  std::size_t requests_run = 0;
  std::size_t mallocs = 0;
  std::size_t frees = 0;
  double wall_ms = 0;
  // allocated: the model's allocated_bytes (sizes rounded as PyTorch rounds them); for
  // cudaMalloc and cudaMallocAsync the requested bytes of live tensors.
  // reserved: the model's reserved_bytes; cudaMalloc: live requested bytes (no cache);
  // cudaMallocAsync: the pool's cudaMemPoolAttrReservedMemCurrent / High.
  Bytes peak_allocated = 0;
  Bytes peak_reserved = 0;
  Bytes final_allocated = 0;
  Bytes final_reserved = 0;
  Bytes peak_device_used = 0;  // the highest device_used seen at a step end
  CallStats malloc_calls;
  CallStats free_calls;
  CallStats empty_cache_calls;
  std::map<std::string, CallStats> device_calls;  // by CUDA call name
  std::vector<StepRecord> steps;
  // The model only: final statistics, and the check that its reserved bytes equal the bytes
  // CudaDevice holds after every request (mismatches counted, the first one described).
  std::optional<alloc::DeviceStats> model_stats;
  std::uint64_t reserved_mismatches = 0;
  std::string first_reserved_mismatch;
};

// Throws GpuUnavailable when there is no GPU, InputError for a malformed request stream (a free
// of a tensor that is not allocated), CudaError when a CUDA call fails other than by running out
// of memory.
GpuRunResult run_on_gpu(const RequestStream& requests, const GpuRunOptions& options);

nlohmann::json to_json(const GpuRunResult& result, bool include_steps = true);

}  // namespace fragscope::cuda
