#include "engine/cuda/gpu_run.h"

#include <limits>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "engine/allocator/caching_allocator.h"
#include "engine/core/error.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_device.h"

namespace fragscope::cuda {

std::string_view to_string(GpuAllocator allocator) {
  switch (allocator) {
    case GpuAllocator::model:
      return "model";
    case GpuAllocator::cuda_malloc:
      return "cudaMalloc";
    case GpuAllocator::cuda_malloc_async:
      return "cudaMallocAsync";
  }
  return "model";
}

std::optional<GpuAllocator> gpu_allocator_from_string(std::string_view name) {
  for (auto a : {GpuAllocator::model, GpuAllocator::cuda_malloc, GpuAllocator::cuda_malloc_async})
    if (name == to_string(a))
      return a;
  return std::nullopt;
}

namespace {

using detail::check;

// What one allocator policy does with the requests; run_on_gpu drives it.
class Backend {
 public:
  virtual ~Backend() = default;
  // The block's address (0 for a zero-byte request), or the OOM message.
  virtual std::optional<std::uint64_t> malloc(Bytes bytes, cudaStream_t stream, StreamId id,
                                              std::string& oom_message) = 0;
  virtual void free(std::uint64_t address, Bytes bytes, cudaStream_t stream) = 0;
  // `user` used the block; its free has to wait for `user`'s work.
  virtual void record_stream(std::uint64_t address, StreamId user_id, cudaStream_t user) = 0;
  virtual void events_ready(std::uint64_t address) = 0;
  virtual void empty_cache() = 0;
  virtual void reset_peak() = 0;
  virtual Bytes allocated() const = 0;
  virtual Bytes reserved() const = 0;
  virtual Bytes peak_allocated() const = 0;
  virtual Bytes peak_reserved() const = 0;
  // Device calls so far, all kinds together and by name.
  virtual CallStats device_calls() const = 0;
  virtual std::map<std::string, CallStats> device_calls_by_name() const = 0;
};

// --- model: the caching-allocator model over real memory ---------------------------------------

class ModelBackend final : public Backend {
 public:
  ModelBackend(const GpuRunOptions& options)
      : device_(options.device), allocator_(options.config, device_, options.sink) {
    if (options.capacity)
      allocator_.set_allowed_memory(options.capacity);
  }

  std::optional<std::uint64_t> malloc(Bytes bytes, cudaStream_t, StreamId id,
                                      std::string& oom_message) override {
    alloc::MallocResult got = allocator_.malloc(bytes, id);
    if (!got.ok()) {
      oom_message = got.oom->message;
      return std::nullopt;
    }
    return got.address;
  }
  void free(std::uint64_t address, Bytes, cudaStream_t) override { allocator_.free(address); }
  void record_stream(std::uint64_t address, StreamId user_id, cudaStream_t) override {
    allocator_.record_stream(address, user_id);
  }
  void events_ready(std::uint64_t address) override { allocator_.mark_events_ready(address); }
  void empty_cache() override { allocator_.empty_cache(); }
  void reset_peak() override { allocator_.reset_peak_stats(); }
  Bytes allocated() const override { return stat(stats().allocated_bytes).current; }
  Bytes reserved() const override { return stat(stats().reserved_bytes).current; }
  Bytes peak_allocated() const override { return stat(stats().allocated_bytes).peak; }
  Bytes peak_reserved() const override { return stat(stats().reserved_bytes).peak; }
  CallStats device_calls() const override { return device_.call_stats().all(); }
  std::map<std::string, CallStats> device_calls_by_name() const override {
    const CudaDeviceCallStats& s = device_.call_stats();
    return {{"cudaMalloc", s.cuda_malloc},
            {"cudaFree", s.cuda_free},
            {"cuMemAddressReserve", s.address_reserve},
            {"cuMemAddressFree", s.address_free},
            {"map_pages", s.map},
            {"unmap_pages", s.unmap}};
  }

  const alloc::DeviceStats& stats() const { return allocator_.stats(); }
  const CudaDevice& device() const { return device_; }

 private:
  struct Current {
    Bytes current;
    Bytes peak;
  };
  static Current stat(const alloc::StatArray& array) {
    const alloc::Stat& s = array[alloc::StatType::aggregate];
    return {static_cast<Bytes>(s.current), static_cast<Bytes>(s.peak)};
  }

  CudaDevice device_;  // declared first: the allocator's memory lives on it
  alloc::CachingAllocator allocator_;
};

// Live-tensor accounting shared by the two CUDA allocators, with the emulated capacity.
class LiveBytes {
 public:
  explicit LiveBytes(std::optional<Bytes> capacity) : capacity_(capacity) {}
  bool fits(Bytes bytes) const { return !capacity_ || live_ + bytes <= *capacity_; }
  void add(Bytes bytes) {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  void remove(Bytes bytes) { live_ -= bytes; }
  void reset_peak() { peak_ = live_; }
  Bytes live() const { return live_; }
  Bytes peak() const { return peak_; }
  std::string refusal(Bytes bytes) const {
    return "emulated capacity: " + std::to_string(bytes) + " bytes requested with " +
           std::to_string(live_) + " of " + std::to_string(*capacity_) + " bytes in use";
  }

 private:
  std::optional<Bytes> capacity_;
  Bytes live_ = 0;
  Bytes peak_ = 0;
};

// --- cudaMalloc: no cache ----------------------------------------------------------------------

class CudaMallocBackend final : public Backend {
 public:
  explicit CudaMallocBackend(const GpuRunOptions& options) : live_(options.capacity) {}
  ~CudaMallocBackend() override {
    for (const auto& [address, bytes] : blocks_)
      cudaFree(reinterpret_cast<void*>(address));
    cudaGetLastError();
  }

  std::optional<std::uint64_t> malloc(Bytes bytes, cudaStream_t, StreamId,
                                      std::string& oom_message) override {
    if (bytes == 0)
      return 0;
    if (!live_.fits(bytes)) {
      oom_message = live_.refusal(bytes);
      return std::nullopt;
    }
    void* pointer = nullptr;
    const CallTimer timer;
    const cudaError_t status = cudaMalloc(&pointer, bytes);
    malloc_.add(timer.elapsed_ns());
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ++malloc_.failures;
      oom_message = "cudaMalloc(" + std::to_string(bytes) + "): " + detail::describe(status);
      return std::nullopt;
    }
    check(status, "cudaMalloc(" + std::to_string(bytes) + ")");
    const auto address = reinterpret_cast<std::uint64_t>(pointer);
    blocks_.emplace(address, bytes);
    live_.add(bytes);
    return address;
  }
  void free(std::uint64_t address, Bytes bytes, cudaStream_t) override {
    if (address == 0)
      return;
    const CallTimer timer;
    const cudaError_t status = cudaFree(reinterpret_cast<void*>(address));
    free_.add(timer.elapsed_ns());
    check(status, "cudaFree");
    blocks_.erase(address);
    live_.remove(bytes);
  }
  // cudaFree synchronizes the device, so other streams' use is always finished by then.
  void record_stream(std::uint64_t, StreamId, cudaStream_t) override {}
  void events_ready(std::uint64_t) override {}
  void empty_cache() override {}
  void reset_peak() override { live_.reset_peak(); }
  Bytes allocated() const override { return live_.live(); }
  Bytes reserved() const override { return live_.live(); }
  Bytes peak_allocated() const override { return live_.peak(); }
  Bytes peak_reserved() const override { return live_.peak(); }
  CallStats device_calls() const override {
    CallStats all = malloc_;
    all += free_;
    return all;
  }
  std::map<std::string, CallStats> device_calls_by_name() const override {
    return {{"cudaMalloc", malloc_}, {"cudaFree", free_}};
  }

 private:
  LiveBytes live_;
  std::unordered_map<std::uint64_t, Bytes> blocks_;
  CallStats malloc_;
  CallStats free_;
};

// --- cudaMallocAsync: CUDA's stream-ordered pool -----------------------------------------------

class CudaMallocAsyncBackend final : public Backend {
 public:
  explicit CudaMallocAsyncBackend(const GpuRunOptions& options) : live_(options.capacity) {
    check(cudaDeviceGetDefaultMemPool(&pool_, options.device), "cudaDeviceGetDefaultMemPool");
    // PyTorch's cudaMallocAsync backend keeps everything it freed: release threshold "infinite".
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold),
          "cudaMemPoolSetAttribute(ReleaseThreshold)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo");  // start from an empty pool
    reset_pool_peaks();
  }
  ~CudaMallocAsyncBackend() override {
    for (const auto& [address, block] : blocks_)
      cudaFreeAsync(reinterpret_cast<void*>(address), block.stream);
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
    cudaGetLastError();
  }

  std::optional<std::uint64_t> malloc(Bytes bytes, cudaStream_t stream, StreamId,
                                      std::string& oom_message) override {
    if (bytes == 0)
      return 0;
    if (!live_.fits(bytes)) {
      oom_message = live_.refusal(bytes);
      return std::nullopt;
    }
    void* pointer = nullptr;
    const CallTimer timer;
    const cudaError_t status = cudaMallocAsync(&pointer, bytes, stream);
    malloc_.add(timer.elapsed_ns());
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ++malloc_.failures;
      oom_message = "cudaMallocAsync(" + std::to_string(bytes) + "): " + detail::describe(status);
      return std::nullopt;
    }
    check(status, "cudaMallocAsync(" + std::to_string(bytes) + ")");
    const auto address = reinterpret_cast<std::uint64_t>(pointer);
    blocks_.emplace(address, Block{bytes, stream, {}});
    live_.add(bytes);
    peak_reserved_ = std::max(peak_reserved_, reserved());
    return address;
  }
  void free(std::uint64_t address, Bytes bytes, cudaStream_t stream) override {
    if (address == 0)
      return;
    auto it = blocks_.find(address);
    // Stream order: the free must come after the work of every stream that used the block.
    for (cudaEvent_t used : it->second.uses) {
      check(cudaStreamWaitEvent(stream, used, 0), "cudaStreamWaitEvent");
      cudaEventDestroy(used);
    }
    const CallTimer timer;
    const cudaError_t status = cudaFreeAsync(reinterpret_cast<void*>(address), stream);
    free_.add(timer.elapsed_ns());
    check(status, "cudaFreeAsync");
    blocks_.erase(it);
    live_.remove(bytes);
  }
  void record_stream(std::uint64_t address, StreamId, cudaStream_t user) override {
    auto it = blocks_.find(address);
    if (it == blocks_.end() || user == it->second.stream)
      return;
    cudaEvent_t used = nullptr;
    check(cudaEventCreateWithFlags(&used, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(used, user), "cudaEventRecord");
    it->second.uses.push_back(used);
  }
  void events_ready(std::uint64_t) override {}
  void empty_cache() override {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo");
  }
  void reset_peak() override {
    live_.reset_peak();
    reset_pool_peaks();
  }
  Bytes allocated() const override { return live_.live(); }
  Bytes reserved() const override { return attribute(cudaMemPoolAttrReservedMemCurrent); }
  Bytes peak_allocated() const override { return live_.peak(); }
  Bytes peak_reserved() const override {
    return std::max(peak_reserved_, attribute(cudaMemPoolAttrReservedMemHigh));
  }
  CallStats device_calls() const override {
    CallStats all = malloc_;
    all += free_;
    return all;
  }
  std::map<std::string, CallStats> device_calls_by_name() const override {
    return {{"cudaMallocAsync", malloc_}, {"cudaFreeAsync", free_}};
  }

 private:
  struct Block {
    Bytes bytes = 0;
    cudaStream_t stream = nullptr;
    std::vector<cudaEvent_t> uses;
  };
  Bytes attribute(cudaMemPoolAttr which) const {
    std::uint64_t value = 0;
    check(cudaMemPoolGetAttribute(pool_, which, &value), "cudaMemPoolGetAttribute");
    return value;
  }
  void reset_pool_peaks() {
    std::uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero),
          "cudaMemPoolSetAttribute(ReservedMemHigh)");
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero),
          "cudaMemPoolSetAttribute(UsedMemHigh)");
    peak_reserved_ = reserved();
  }

  cudaMemPool_t pool_ = nullptr;
  LiveBytes live_;
  std::unordered_map<std::uint64_t, Block> blocks_;
  Bytes peak_reserved_ = 0;
  CallStats malloc_;
  CallStats free_;
};

// --- the driver loop ---------------------------------------------------------------------------

// The real CUDA streams standing in for the request stream's StreamIds (non-blocking, so none of
// them synchronizes with the legacy default stream).
class Streams {
 public:
  ~Streams() {
    for (const auto& [id, stream] : streams_)
      cudaStreamDestroy(stream);
  }
  cudaStream_t get(StreamId id) {
    auto it = streams_.find(id.value);
    if (it != streams_.end())
      return it->second;
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    streams_.emplace(id.value, stream);
    return stream;
  }

 private:
  std::unordered_map<std::uint64_t, cudaStream_t> streams_;
};

class EventPair {
 public:
  EventPair() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&end_), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
  }
  void start(cudaStream_t stream) { check(cudaEventRecord(start_, stream), "cudaEventRecord"); }
  float stop_ms(cudaStream_t stream) {
    check(cudaEventRecord(end_, stream), "cudaEventRecord");
    check(cudaEventSynchronize(end_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
};

Bytes device_free_bytes() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return free_bytes;
}

std::unique_ptr<Backend> make_backend(const GpuRunOptions& options) {
  switch (options.allocator) {
    case GpuAllocator::model:
      return std::make_unique<ModelBackend>(options);
    case GpuAllocator::cuda_malloc:
      return std::make_unique<CudaMallocBackend>(options);
    case GpuAllocator::cuda_malloc_async:
      return std::make_unique<CudaMallocAsyncBackend>(options);
  }
  return nullptr;
}

std::string where(std::size_t index) {
  return "request " + std::to_string(index) + ": ";
}

struct LiveTensor {
  std::uint64_t address = 0;
  Bytes size = 0;
  StreamId stream{};
  bool used_elsewhere = false;  // record_stream by another stream: its free becomes pending
};

}  // namespace

GpuRunResult run_on_gpu(const RequestStream& requests, const GpuRunOptions& options) {
  GpuRunResult result;
  result.allocator = options.allocator;
  result.environment = query_environment(options.device);
  check(cudaSetDevice(options.device), "cudaSetDevice");

  Streams streams;
  const StreamId main_id =
      requests.requests.empty() ? StreamId{0} : requests.requests.front().stream;
  cudaStream_t main_stream = streams.get(main_id);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const Bytes free_at_start = device_free_bytes();

  std::unique_ptr<Backend> backend = make_backend(options);
  auto* model = dynamic_cast<ModelBackend*>(backend.get());

  std::unordered_map<std::uint64_t, LiveTensor> live;        // tensor id -> block
  std::unordered_map<std::uint64_t, std::uint64_t> pending;  // freed tensor -> address
  std::unordered_set<std::uint64_t> no_memory;               // zero-byte tensors

  EventPair events;
  StepRecord step;
  CallStats step_calls_before = backend->device_calls();
  CallStats step_allocator_calls;
  auto step_timer = std::make_unique<CallTimer>();
  events.start(main_stream);

  auto close_step = [&]() {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    step.gpu_ms = events.stop_ms(main_stream);
    step.host_ms = static_cast<double>(step_timer->elapsed_ns()) / 1e6;
    CallStats calls = backend->device_calls();
    step.device_calls = CallStats{calls.count - step_calls_before.count,
                                  calls.failures - step_calls_before.failures,
                                  calls.total_ns - step_calls_before.total_ns, 0};
    step.allocator_calls = step_allocator_calls;
    step.allocated = backend->allocated();
    step.reserved = backend->reserved();
    step.device_used = free_at_start - std::min(free_at_start, device_free_bytes());
    result.peak_device_used = std::max(result.peak_device_used, step.device_used);
    if (options.empty_cache_every_step && step.step >= 0) {
      const CallTimer timer;
      backend->empty_cache();
      const std::int64_t ns = timer.elapsed_ns();
      result.empty_cache_calls.add(ns);
      step.empty_cache_ms = static_cast<double>(ns) / 1e6;
      step.reserved_after_empty_cache = backend->reserved();
    }
    result.steps.push_back(step);
    step = StepRecord{};
    step_calls_before = backend->device_calls();
    step_allocator_calls = CallStats{};
    step_timer = std::make_unique<CallTimer>();
    events.start(main_stream);
  };

  auto check_reserved = [&](std::size_t index) {
    if (!model)
      return;
    const Bytes held = model->device().bytes_in_use();
    if (model->reserved() != held) {
      if (result.reserved_mismatches++ == 0)
        result.first_reserved_mismatch = where(index) + "model reserved " +
                                         std::to_string(model->reserved()) +
                                         " bytes, CudaDevice holds " + std::to_string(held);
    }
  };

  const CallTimer run_timer;
  const auto& list = requests.requests;
  for (std::size_t index = 0; index < list.size(); ++index) {
    const Request& r = list[index];
    ++result.requests_run;
    switch (r.op) {
      case RequestOp::malloc: {
        if (live.contains(r.tensor.value) || no_memory.contains(r.tensor.value))
          throw InputError(where(index) + "tensor " + std::to_string(r.tensor.value) +
                           " is allocated twice");
        cudaStream_t stream = streams.get(r.stream);
        std::string oom_message;
        const CallTimer timer;
        const std::optional<std::uint64_t> address =
            backend->malloc(r.size, stream, r.stream, oom_message);
        const std::int64_t ns = timer.elapsed_ns();
        result.malloc_calls.add(ns);
        step_allocator_calls.add(ns);
        if (!address) {
          result.oom = GpuOom{index, r.size, oom_message};
          break;
        }
        ++result.mallocs;
        if (*address == 0) {
          no_memory.insert(r.tensor.value);
        } else {
          live.emplace(r.tensor.value, LiveTensor{*address, r.size, r.stream, false});
          if (options.touch)
            check(cudaMemsetAsync(reinterpret_cast<void*>(*address), 0, r.size, stream),
                  "cudaMemsetAsync");
        }
        break;
      }
      case RequestOp::free: {
        if (no_memory.erase(r.tensor.value) != 0)
          break;
        auto it = live.find(r.tensor.value);
        if (it == live.end())
          throw InputError(where(index) + "free of tensor " + std::to_string(r.tensor.value) +
                           ", which is not allocated");
        const CallTimer timer;
        backend->free(it->second.address, it->second.size, streams.get(it->second.stream));
        const std::int64_t ns = timer.elapsed_ns();
        result.free_calls.add(ns);
        step_allocator_calls.add(ns);
        ++result.frees;
        if (it->second.used_elsewhere)
          pending.emplace(r.tensor.value, it->second.address);
        live.erase(it);
        break;
      }
      case RequestOp::record_stream: {
        auto it = live.find(r.tensor.value);
        if (it == live.end()) {
          if (no_memory.contains(r.tensor.value))
            break;
          throw InputError(where(index) + "record_stream of tensor " +
                           std::to_string(r.tensor.value) + ", which is not allocated");
        }
        backend->record_stream(it->second.address, r.stream, streams.get(r.stream));
        if (r.stream != it->second.stream)
          it->second.used_elsewhere = true;
        break;
      }
      case RequestOp::events_ready: {
        auto it = pending.find(r.tensor.value);
        if (it != pending.end()) {
          backend->events_ready(it->second);
          pending.erase(it);
        }
        break;
      }
      case RequestOp::empty_cache: {
        const CallTimer timer;
        backend->empty_cache();
        result.empty_cache_calls.add(timer.elapsed_ns());
        break;
      }
      case RequestOp::step_begin:
        if (index != 0 || step.step >= 0)
          close_step();
        step.step = static_cast<std::int64_t>(r.size);
        step.first_request = index;
        break;
      case RequestOp::reset_peak:
        backend->reset_peak();
        break;
      case RequestOp::pool_create:
      case RequestOp::pool_begin:
      case RequestOp::pool_end:
      case RequestOp::pool_release:
      case RequestOp::pool_empty_cache:
        // Private pools need CUDA graph capture or MemPool on the device: not run here.
        throw InputError("request " + std::to_string(index) +
                         ": private pools (CUDA graphs, MemPool) are not run on the GPU backend");
    }
    check_reserved(index);
    if (result.oom)
      break;
  }
  close_step();
  result.wall_ms = static_cast<double>(run_timer.elapsed_ns()) / 1e6;
  result.peak_allocated = backend->peak_allocated();
  result.peak_reserved = backend->peak_reserved();
  result.final_allocated = backend->allocated();
  result.final_reserved = backend->reserved();
  result.device_calls = backend->device_calls_by_name();
  if (model)
    result.model_stats = model->stats();
  return result;
}

namespace {

nlohmann::json to_json(const StepRecord& s) {
  nlohmann::json out = {{"step", s.step},
                        {"first_request", s.first_request},
                        {"host_ms", s.host_ms},
                        {"gpu_ms", s.gpu_ms},
                        {"allocator_calls", to_json(s.allocator_calls)},
                        {"device_calls", to_json(s.device_calls)},
                        {"allocated", s.allocated},
                        {"reserved", s.reserved},
                        {"device_used", s.device_used}};
  if (s.empty_cache_ms) {
    out["empty_cache_ms"] = *s.empty_cache_ms;
    out["reserved_after_empty_cache"] = s.reserved_after_empty_cache;
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const GpuRunResult& r, bool include_steps) {
  nlohmann::json device_calls = nlohmann::json::object();
  for (const auto& [name, stats] : r.device_calls)
    device_calls[name] = to_json(stats);
  nlohmann::json out = {
      {"allocator", std::string(to_string(r.allocator))},
      {"environment", to_json(r.environment)},
      {"outcome", r.oom ? "oom" : "ok"},
      {"oom", nullptr},
      {"requests_run", r.requests_run},
      {"mallocs", r.mallocs},
      {"frees", r.frees},
      {"wall_ms", r.wall_ms},
      {"peak_allocated", r.peak_allocated},
      {"peak_reserved", r.peak_reserved},
      {"final_allocated", r.final_allocated},
      {"final_reserved", r.final_reserved},
      {"peak_device_used", r.peak_device_used},
      {"malloc_calls", to_json(r.malloc_calls)},
      {"free_calls", to_json(r.free_calls)},
      {"empty_cache_calls", to_json(r.empty_cache_calls)},
      {"device_calls", device_calls},
  };
  if (r.oom)
    out["oom"] = {{"request_index", r.oom->request_index},
                  {"size", r.oom->size},
                  {"message", r.oom->message}};
  if (r.model_stats) {
    const auto& s = *r.model_stats;
    using alloc::StatType;
    out["model"] = {{"num_device_alloc", s.num_device_alloc},
                    {"num_device_free", s.num_device_free},
                    {"num_alloc_retries", s.num_alloc_retries},
                    {"num_ooms", s.num_ooms},
                    {"peak_inactive_split_bytes", s.inactive_split_bytes[StatType::aggregate].peak},
                    {"peak_active_bytes", s.active_bytes[StatType::aggregate].peak},
                    {"peak_requested_bytes", s.requested_bytes[StatType::aggregate].peak},
                    {"reserved_matches_device", r.reserved_mismatches == 0},
                    {"reserved_mismatches", r.reserved_mismatches},
                    {"first_reserved_mismatch", r.first_reserved_mismatch}};
  }
  if (include_steps) {
    nlohmann::json steps = nlohmann::json::array();
    for (const StepRecord& s : r.steps)
      steps.push_back(to_json(s));
    out["steps"] = std::move(steps);
  }
  return out;
}

}  // namespace fragscope::cuda
