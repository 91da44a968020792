#include "storage/db/simulated_run.h"

#include "storage/db/stats_keyframes.h"

namespace fragscope::storage {

RunId store_simulated_run(RunStore& store, ExperimentId experiment,
                          const workload::ExperimentPoint& point,
                          const workload::PointResult& result) {
  RunRecord record;
  record.experiment = experiment;
  record.name = point.name;
  record.source = RunSource::simulated;
  record.alloc_conf = point.alloc_conf.raw;
  record.capacity = point.device.allowed > 0 ? point.device.allowed : point.device.capacity;
  record.device_name = point.device.name;
  record.environment = Environment::current();
  record.environment.gpu_name = point.device.name;
  record.environment.gpu_memory = point.device.total_memory;
  const RunId id = store.begin_run(record);
  store.set_labels(id, result.labels);
  store.append_events(id, result.events, EventColumns{{}, result.event_labels});
  nlohmann::json summary = workload::to_json(result);
  // The failed request is the last event the model recorded before the run stopped.
  if (result.oom && !result.events.empty())
    store.add_oom_report(id, result.events.size() - 1, summary.at("oom"));
  summary["config"] = point.config;
  if (!result.step_first_events.empty())
    summary["step_first_events"] = result.step_first_events;
  store.finish_run(id, result.oom ? RunStatus::oom : RunStatus::ok, summary, result.wall_seconds);
  // A long run's Summary at any cursor replays from the keyframe before it.
  if (run_has_stats_keyframes(result.events.size()))
    store_stats_keyframes(store, id);
  return id;
}

}  // namespace fragscope::storage
