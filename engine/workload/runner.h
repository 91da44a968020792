#pragma once
// Runs one experiment point: generates its request stream and feeds it to the caching-allocator
// model on a simulated device of the point's capacity, stopping at the first OOM as the training
// script would.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/allocator/run.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "engine/workload/experiment.h"

namespace fragscope::workload {

struct PointResult {
  std::string name;
  bool oom = false;
  Bytes peak_allocated = 0;
  Bytes peak_reserved = 0;
  alloc::DeviceStats stats;                   // memory_stats() when the run ended
  std::optional<alloc::RequestOom> oom_info;  // the failing request, when oom
  std::optional<RequestLabel> oom_label;      // what the failing request was for
  int oom_step = -1;                          // the optimizer step it failed in
  int steps_completed = 0;
  double estimated_step_time_ratio = 1.0;
  std::size_t requests = 0;
  double wall_seconds = 0;
  // Filled when asked to record: every allocator event and the label of each (0 = none).
  std::vector<TraceEvent> events;
  std::vector<LabelId> event_labels;
  std::vector<RequestLabel> labels;
  // Filled with the events: the event index where each optimizer step the run reached begins
  // (its first allocation), so plots can line runs up by step.
  std::vector<std::uint64_t> step_first_events;
};

// A cancelled `cancel` stops the run within a few thousand requests (fragscope::Cancelled).
// `progress` is told the run's ("requests", done, requests) (alloc::kRunStages), ending at 1 of 1.
PointResult run_point(const ExperimentPoint& point, bool record_events,
                      const CancelToken& cancel = {}, const Progress& progress = {});

// {"name","outcome","peak_allocated","peak_reserved","memory_stats","oom","steps_completed",
//  "estimated_step_time_ratio"} — the CLI's and the stored run summary's shape.
nlohmann::json to_json(const PointResult& result);

}  // namespace fragscope::workload
