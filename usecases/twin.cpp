#include "usecases/twin.h"

#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/workload/workload.h"

namespace fragscope::usecases {

TwinRun store_twin(storage::RunStore& store, storage::RunId recording,
                   std::optional<storage::ExperimentId> experiment,
                   const workload::ExperimentPoint& point, Bytes gpu_total, Bytes limit,
                   const std::string& gpu_name, const WorkControl& control) {
  const RequestStream requests = workload::generate(point.workload);
  control.check();
  alloc::SimulatedDevice device(gpu_total, gpu_total);
  alloc::TraceRecorder recorder;
  alloc::RunOptions options;
  options.allowed_memory = limit;
  options.cancel = control.cancel;
  options.progress = control.progress;
  TwinRun twin;
  twin.result = alloc::run_requests(requests, point.alloc_conf, device, &recorder, options);
  control.check();

  storage::RunRecord record;
  record.experiment = experiment;
  record.name = point.name + " [model twin]";
  record.source = storage::RunSource::simulated;
  record.alloc_conf = point.alloc_conf.raw;
  record.capacity = limit;
  record.device_name = "simulated " + gpu_name;
  record.environment = storage::Environment::current();
  twin.run = store.begin_run(record);
  store.append_events(twin.run, recorder.events());
  store.finish_run(twin.run,
                   twin.result.ooms.empty() ? storage::RunStatus::ok : storage::RunStatus::oom,
                   {{"peak_allocated", twin.result.peak_allocated},
                    {"peak_reserved", twin.result.peak_reserved},
                    {"twin_of", recording.value}});
  store.set_twin(recording, twin.run);
  return twin;
}

}  // namespace fragscope::usecases
