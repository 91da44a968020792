// fragscope-cli gpu-run: an experiment's request streams on a real GPU, under the allocator model
// (real cudaMalloc / mapped pages), plain cudaMalloc, or CUDA's cudaMallocAsync pool.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/core/error.h"

#ifdef FRAGSCOPE_HAVE_CUDA
#include <chrono>

#include "engine/allocator/config.h"
#include "engine/allocator/event_sink.h"
#include "engine/cuda/cuda_error.h"
#include "engine/cuda/gpu_run.h"
#include "engine/workload/experiment.h"
#include "storage/db/data_location.h"
#include "storage/db/experiment_status.h"
#include "storage/db/run_store.h"
#endif

namespace fragscope::cli {
namespace {

constexpr const char* kUsage =
    "gpu-run EXPERIMENT.json [--allocator model|cudaMalloc|cudaMallocAsync|all] "
    "[--variant NAME] [--empty-cache-every-step] [--no-touch] [--device N] [--json FILE|-] "
    "[--db FILE]";

#ifdef FRAGSCOPE_HAVE_CUDA

std::vector<cuda::GpuAllocator> allocators_of(const std::string& name) {
  if (name == "all")
    return {cuda::GpuAllocator::model, cuda::GpuAllocator::cuda_malloc,
            cuda::GpuAllocator::cuda_malloc_async};
  if (auto one = cuda::gpu_allocator_from_string(name))
    return {*one};
  throw UsageError{"--allocator: expected model, cudaMalloc, cudaMallocAsync or all, got '" + name +
                   "'"};
}

std::string gib(Bytes bytes) {
  return std::to_string(static_cast<double>(bytes) / static_cast<double>(kGiB)).substr(0, 6) +
         " GiB";
}

// The allocator's limit for a point: the per-process limit when the file sets one, else the
// emulated device's capacity (an A100-40GB preset on an H200 is capped at the A100's capacity).
Bytes limit_of(const workload::ExperimentPoint& point) {
  return point.device.allowed != 0 ? point.device.allowed : point.device.capacity;
}

void store_run(storage::RunWriter& store, std::optional<storage::ExperimentId> experiment,
               const workload::ExperimentPoint& point, const cuda::GpuRunResult& result,
               const std::vector<TraceEvent>& events, const nlohmann::json& summary) {
  storage::RunRecord record;
  record.experiment = experiment;
  record.name = point.name + " [" + std::string(cuda::to_string(result.allocator)) + "]";
  record.source = storage::RunSource::gpu;
  record.alloc_conf =
      result.allocator == cuda::GpuAllocator::model ? point.alloc_conf.raw : std::string();
  record.capacity = limit_of(point);
  record.device_name = result.environment.name;
  record.environment = storage::Environment::current();
  record.environment.cuda_version = result.environment.runtime_version;
  record.environment.driver_version = result.environment.driver_release.empty()
                                          ? result.environment.driver_version
                                          : result.environment.driver_release;
  record.environment.gpu_name = result.environment.name;
  record.environment.gpu_memory = result.environment.total_memory;
  const storage::RunId id = store.begin_run(record);
  store.append_events(id, events);
  store.finish_run(id, result.oom ? storage::RunStatus::oom : storage::RunStatus::ok, summary,
                   result.wall_ms / 1e3);
}

int run_gpu_run(const std::vector<std::string>& argv) {
  const Args args(argv, {"--empty-cache-every-step", "--no-touch"},
                  {"--allocator", "--variant", "--device", "--json", "--db"});
  args.expect_positional(1, "one EXPERIMENT.json");
  const auto allocators = allocators_of(args.option_or("--allocator", "model"));
  const workload::Experiment experiment = workload::load_experiment(args.positional()[0]);
  const std::vector<const workload::ExperimentPoint*> points =
      workload::select_points(experiment, args.option("--variant"), args.positional()[0]);
  const int device = static_cast<int>(args.uint_option("--device").value_or(0));
  if (auto reason = cuda::gpu_unavailable_reason(device))
    throw InputError("no GPU to run on: " + *reason);

  std::unique_ptr<storage::RunStore> store;
  std::optional<storage::ExperimentId> experiment_id;
  if (auto db = args.option("--db")) {
    store = std::make_unique<storage::RunStore>(*db);
    // Incomplete until every point has run under every allocator (experiment_status.h).
    experiment_id =
        storage::begin_experiment(*store, experiment.name + " (GPU)", experiment.definition,
                                  points.size() * allocators.size());
  }

  nlohmann::json runs = nlohmann::json::array();
  nlohmann::json environment;
  for (const workload::ExperimentPoint* point : points) {
    const RequestStream requests = workload::generate(point->workload);
    for (cuda::GpuAllocator allocator : allocators) {
      cuda::GpuRunOptions options;
      options.allocator = allocator;
      options.config = point->alloc_conf;
      options.capacity = limit_of(*point);
      options.touch = !args.flag("--no-touch");
      options.empty_cache_every_step = args.flag("--empty-cache-every-step");
      options.device = device;
      alloc::TraceRecorder recorder;
      if (store && allocator == cuda::GpuAllocator::model)
        options.sink = &recorder;
      std::cerr << "gpu-run: " << point->name << " [" << cuda::to_string(allocator) << "] "
                << requests.requests.size() << " requests..." << std::flush;
      cuda::GpuRunResult result;
      try {
        result = cuda::run_on_gpu(requests, options);
      } catch (const cuda::GpuUnavailable& e) {
        throw InputError(std::string("no GPU to run on: ") + e.what());
      }
      std::cerr << " " << (result.oom ? "OOM" : "ok") << ", peak reserved "
                << gib(result.peak_reserved) << ", " << result.wall_ms / 1e3 << " s\n";
      nlohmann::json entry = cuda::to_json(result);
      environment = entry["environment"];
      entry.erase("environment");
      entry["point"] = point->name;
      entry["alloc_conf"] = point->alloc_conf.raw;
      entry["capacity"] = limit_of(*point);
      entry["requests"] = requests.requests.size();
      if (store)
        store_run(*store, experiment_id, *point, result, recorder.events(), entry);
      runs.push_back(std::move(entry));
    }
  }
  if (store)
    storage::finish_experiment(*store, *experiment_id);
  const nlohmann::json out = {
      {"experiment", experiment.name}, {"environment", environment}, {"runs", runs}};
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  for (const auto& run : runs) {
    std::cout << run["point"].get<std::string>() << " [" << run["allocator"].get<std::string>()
              << "]: " << run["outcome"].get<std::string>() << ", peak allocated "
              << gib(run["peak_allocated"].get<Bytes>()) << ", peak reserved "
              << gib(run["peak_reserved"].get<Bytes>()) << ", " << run["steps"].size()
              << " step records, " << run["wall_ms"].get<double>() / 1e3 << " s\n";
  }
  return 0;
}

#else

int run_gpu_run(const std::vector<std::string>& argv) {
  // Parse first, so a malformed command line is a usage error here too.
  const Args args(argv, {"--empty-cache-every-step", "--no-touch"},
                  {"--allocator", "--variant", "--device", "--json", "--db"});
  args.expect_positional(1, "one EXPERIMENT.json");
  throw InputError(
      "this fragscope-cli was built without CUDA, so it cannot run on a GPU (configure with "
      "-DFRAGSCOPE_CUDA=ON on a machine with the CUDA Toolkit)");
}

#endif

}  // namespace

FRAGSCOPE_CLI_COMMAND({"gpu-run", kUsage,
                       "Run an experiment's request streams on a real GPU under the allocator "
                       "model, cudaMalloc or cudaMallocAsync, timing every call and step",
                       run_gpu_run});

}  // namespace fragscope::cli
