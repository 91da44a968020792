#include "storage/db/run_json.h"

namespace fragscope::storage {

nlohmann::json to_json(const RunRecord& run) {
  const Environment& env = run.environment;
  return {
      {"id", run.id.value},
      {"experiment_id", run.experiment ? nlohmann::json(run.experiment->value) : nullptr},
      {"name", run.name},
      {"source", to_string(run.source)},
      {"status", to_string(run.status)},
      {"alloc_conf", run.alloc_conf},
      {"capacity", run.capacity},
      {"device_name", run.device_name},
      {"created_at", run.created_at},
      {"wall_seconds", run.wall_seconds},
      {"environment",
       {{"torch_version", env.torch_version},
        {"cuda_version", env.cuda_version},
        {"driver_version", env.driver_version},
        {"gpu_name", env.gpu_name},
        {"gpu_memory", env.gpu_memory},
        {"fragscope_version", env.fragscope_version},
        {"git_revision", env.git_revision},
        {"host", env.host}}},
      {"twin_run", run.twin_run ? nlohmann::json(run.twin_run->value) : nullptr},
      {"event_count", run.event_count},
      {"summary", run.summary},
  };
}

nlohmann::json to_json(const TimelineBucket& bucket) {
  return {
      {"first_event", bucket.first_event},
      {"end_event", bucket.end_event},
      {"t0", bucket.t0_us},
      {"t1", bucket.t1_us},
      {"allocated_max", bucket.max.allocated},
      {"allocated_min", bucket.min.allocated},
      {"reserved_max", bucket.max.reserved},
      {"reserved_min", bucket.min.reserved},
      {"active_max", bucket.max.active},
      {"active_min", bucket.min.active},
      {"requested_max", bucket.max.requested},
      {"requested_min", bucket.min.requested},
  };
}

}  // namespace fragscope::storage
