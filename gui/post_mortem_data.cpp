#include "gui/post_mortem_data.h"

#include <QObject>
#include <algorithm>

#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/run.h"
#include "engine/analysis/advisor.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/error.h"
#include "engine/workload/experiment.h"
#include "gui/format.h"
#include "gui/job_tracker.h"
#include "gui/run_data.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

namespace {
struct RunRequests {
  storage::RunRecord record;
  alloc::AllocatorConfig config;
  analysis::TraceRequests requests;
  std::vector<TraceEvent> events;
  snapshot::SegmentState initial;
};

RunRequests loadRequests(storage::RunStore& store, storage::RunId run) {
  // The recorded config and the state at the first event, laid out with that config's rules (one
  // loader below storage, shared with the summary's memory_stats_at).
  storage::RunTrace trace = storage::load_run_trace(store, run);
  RunRequests loaded;
  loaded.record = std::move(trace.record);
  loaded.config = std::move(trace.config);
  loaded.events = std::move(trace.events);
  loaded.initial = std::move(trace.initial);
  loaded.requests = analysis::requests_from_trace(loaded.events, loaded.initial);
  return loaded;
}

analysis::WhatIfOptions whatIfOptions(const RunRequests& loaded, std::optional<Bytes> limit) {
  analysis::WhatIfOptions options;
  options.capacity = limit;
  options.threads = 0;
  options.recorded_segments = loaded.requests.recorded_segments;
  return options;
}

// The experiment point a simulated run was made from (its resolved configuration is stored in
// the summary), or nullopt for any other run.
std::optional<workload::ExperimentPoint> experimentPointOf(const storage::RunRecord& record) {
  if (record.source != storage::RunSource::simulated)
    return std::nullopt;
  const auto config = record.summary.find("config");
  if (config == record.summary.end() || !config->is_object())
    return std::nullopt;
  workload::Experiment experiment =
      workload::parse_experiment(*config, "run " + std::to_string(record.id.value));
  if (experiment.points.size() != 1)
    return std::nullopt;
  return std::move(experiment.points.front());
}

// The experiment document that runs a program-change row: the point's configuration with the
// change applied, named after the row.
nlohmann::json changedDocument(const workload::ExperimentPoint& point, const std::string& row) {
  nlohmann::json document = point.config;
  nlohmann::json& training = document["training"];
  const std::string microBatch = "micro-batch ";
  if (row.rfind(microBatch, 0) == 0) {
    training["batch_size"] = std::max(1, point.workload.training.batch_size / 2);
    training["grad_accum"] = point.workload.training.grad_accum * 2;
  } else if (row == "activation checkpointing") {
    training["checkpointing"] = "blocks";
    training["checkpoint_every"] = 1;
  } else {
    return {};
  }
  document["name"] = point.name + " · " + row;
  return document;
}
}  // namespace

std::vector<const analysis::WhatIfRow*> PostMortemData::rowsThatFit() const {
  std::vector<const analysis::WhatIfRow*> rows;
  if (!whatIf)
    return rows;
  const analysis::WhatIfRow* baseline = whatIf->baseline();
  for (const analysis::WhatIfRow& row : whatIf->rows)
    if (row.ok && row.error.empty() && &row != baseline)
      rows.push_back(&row);
  return rows;
}

Bytes PostMortemData::shortfall() const {
  if (postMortems.empty())
    return 0;
  const analysis::OomPostMortem& oom = postMortems.front();
  if (oom.cause != analysis::OomCause::capacity || oom.capacity == 0)
    return 0;
  const Bytes needed = oom.allocated + oom.rounded;
  return needed > oom.capacity ? needed - oom.capacity : 0;
}

QString describeFailingRequest(const analysis::OomPostMortem& oom) {
  if (oom.requested == 0)
    return QObject::tr(
               "a request of %1 (the rounded size: the trace does not record the request "
               "itself); PyTorch tried to allocate %2")
        .arg(formatBytes(static_cast<double>(oom.rounded)),
             formatBytes(static_cast<double>(oom.segment_size)));
  if (oom.requested == oom.rounded)
    return QObject::tr("a request of %1").arg(formatBytes(static_cast<double>(oom.requested)));
  return QObject::tr("a request of %1 (rounded to %2)")
      .arg(formatBytes(static_cast<double>(oom.requested)),
           formatBytes(static_cast<double>(oom.rounded)));
}

PostMortemData loadPostMortem(const QString& databasePath, storage::RunId run,
                              bool whatIfForOomOnly, const JobContext* job) {
  PostMortemData data;
  auto store = openReader(databasePath);
  RunRequests loaded = loadRequests(*store, run);
  data.record = loaded.record;
  data.limit = storage::run_memory_limit(loaded.record);
  // Free memory in CUDA graph / MemPool segments is stranded for a default-pool request.
  const auto pools = analysis::private_segments_from_json(
      loaded.record.summary.value("segment_pools", nlohmann::json()));
  data.postMortems = analysis::trace_post_mortems(loaded.events, loaded.initial, loaded.config,
                                                  data.limit, &pools);
  if (job && job->cancelled())
    return data;
  try {
    analysis::MetricsRecorder::Options options;
    options.keep_samples = false;
    data.metrics = analysis::measure_trace(loaded.events, loaded.initial, options);
  } catch (const std::exception& error) {
    data.metricsError = QString::fromUtf8(error.what());
  }
  if (!data.postMortems.empty() && !store->labels(run).empty()) {
    const std::uint64_t at = data.postMortems.front().event_index;
    const auto buckets = store->category_timeline(run, at, at + 1, 1);
    if (!buckets.empty())
      data.categoriesAtOom = buckets.front().bytes;
  }
  if (job && job->cancelled())
    return data;
  if (job)
    job->progress(0.3);
  if (data.postMortems.empty() && whatIfForOomOnly)
    return data;
  try {
    // A simulated run of an experiment: the advisor also runs the workload changes.
    std::optional<workload::ExperimentPoint> point;
    try {
      point = experimentPointOf(loaded.record);
    } catch (const std::exception&) {
      point.reset();  // an older or foreign configuration: the allocator settings alone
    }
    if (point) {
      analysis::AdviseOptions options;
      options.capacity = data.limit;
      const analysis::Advice advice =
          analysis::advise_experiment(*point, loaded.record.name, options);
      data.whatIf = advice.table;
      for (const analysis::WhatIfRow& row : advice.table.rows) {
        nlohmann::json document = changedDocument(*point, row.name);
        if (!document.is_null())
          data.workloadChanges[row.name] = std::move(document);
      }
    } else {
      const auto candidates =
          analysis::standard_mitigations(loaded.requests.requests, loaded.config);
      data.whatIf = analysis::run_what_if(loaded.requests.requests, candidates,
                                          whatIfOptions(loaded, data.limit));
    }
  } catch (const std::exception& error) {
    data.whatIfError = QString::fromUtf8(error.what());
  }
  return data;
}

storage::RunId runMitigation(const QString& databasePath, storage::RunId run,
                             const std::string& mitigation, const JobContext* job) {
  RunRequests loaded = loadRequests(*openReader(databasePath), run);
  const auto candidates = analysis::standard_mitigations(loaded.requests.requests, loaded.config);
  const auto chosen =
      std::find_if(candidates.begin(), candidates.end(),
                   [&](const analysis::Mitigation& m) { return m.name == mitigation; });
  if (chosen == candidates.end())
    throw InputError("run " + std::to_string(run.value) + ": no mitigation named \"" + mitigation +
                     "\"");
  if (job && job->cancelled())
    throw InputError("cancelled");
  const std::optional<Bytes> limit = storage::run_memory_limit(loaded.record);
  // The same device the what-if row ran on, so the stored replay is the row's run exactly: the
  // whole simulated device, the recording's segment addresses to break best-fit ties.
  const Bytes deviceMemory = std::max(analysis::kDefaultDeviceMemory, limit.value_or(0));
  alloc::SimulatedDevice simulated(deviceMemory, deviceMemory);
  alloc::RecordedAddressDevice device(loaded.requests.recorded_segments, simulated);
  alloc::TraceRecorder recorder;
  alloc::RunOptions options;
  options.allowed_memory = limit;
  const RequestStream& requests = chosen->requests ? *chosen->requests : loaded.requests.requests;
  const alloc::RunResult result =
      alloc::run_requests(requests, chosen->config, device, &recorder, options);

  storage::RunStore store(databasePath.toStdString());
  storage::RunRecord record;
  record.name = loaded.record.name + " · " + chosen->name;
  record.source = storage::RunSource::simulated;
  record.alloc_config = chosen->alloc_conf;
  record.capacity = limit.value_or(0);
  record.device_name = loaded.record.device_name;
  record.environment = storage::Environment::current();
  record.environment.gpu_name = loaded.record.environment.gpu_name;
  const storage::RunId created = store.begin_run(record);
  store.append_events(created, recorder.events());
  nlohmann::json summary;
  summary["mitigation_of"] = run.value;
  summary["mitigation"] = chosen->name;
  store.finish_run(created, result.ooms.empty() ? storage::RunStatus::ok : storage::RunStatus::oom,
                   summary);
  return created;
}

}  // namespace fragscope::gui
