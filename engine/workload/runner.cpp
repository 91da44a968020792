#include "engine/workload/runner.h"

#include <chrono>
#include <span>
#include <unordered_map>

#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/core/error.h"

namespace fragscope::workload {
namespace {

// Gives every allocator event the label of the request behind it: the k-th alloc event is the
// k-th malloc request (the run stops at the first failure), frees carry the label of the block
// at their address, segment events none.
class LabellingSink final : public alloc::EventSink {
 public:
  explicit LabellingSink(const RequestStream& stream) {
    for (const Request& r : stream.requests)
      if (r.op == RequestOp::malloc)
        malloc_labels_.push_back(r.label);
  }

  void on_event(const TraceEvent& event) override {
    LabelId label{};
    switch (event.action) {
      case TraceAction::alloc:
        if (next_malloc_ < malloc_labels_.size())
          label = malloc_labels_[next_malloc_++];
        live_[event.addr] = label;
        break;
      case TraceAction::free_requested:
        label = live_[event.addr];
        break;
      case TraceAction::free_completed: {
        const auto it = live_.find(event.addr);
        if (it != live_.end()) {
          label = it->second;
          live_.erase(it);
        }
        break;
      }
      default:
        break;
    }
    events.push_back(event);
    labels.push_back(label);
  }

  std::vector<TraceEvent> events;
  std::vector<LabelId> labels;

 private:
  std::vector<LabelId> malloc_labels_;
  std::size_t next_malloc_ = 0;
  std::unordered_map<std::uint64_t, LabelId> live_;
};

// The event of each step's first allocation: the k-th alloc event is the k-th malloc request,
// so a step_begin marker after m mallocs opens at the (m+1)-th alloc event. Steps the run never
// reached (it stopped at an OOM) are left out.
std::vector<std::uint64_t> step_first_events(const RequestStream& stream,
                                             std::span<const TraceEvent> events) {
  std::vector<std::size_t> mallocs_before;
  std::size_t mallocs = 0;
  for (const Request& r : stream.requests) {
    if (r.op == RequestOp::step_begin)
      mallocs_before.push_back(mallocs);
    else if (r.op == RequestOp::malloc)
      ++mallocs;
  }
  std::vector<std::uint64_t> firsts;
  std::size_t allocs = 0;
  auto next = mallocs_before.begin();
  for (std::size_t i = 0; i < events.size() && next != mallocs_before.end(); ++i) {
    if (events[i].action != TraceAction::alloc)
      continue;
    while (next != mallocs_before.end() && *next == allocs) {
      firsts.push_back(i);
      ++next;
    }
    ++allocs;
  }
  return firsts;
}

}  // namespace

PointResult run_point(const ExperimentPoint& point, bool record_events, const CancelToken& cancel,
                      const Progress& progress) {
  const auto start = std::chrono::steady_clock::now();
  const alloc::AllocatorConfig& config = point.alloc_conf;
  const RequestStream stream = generate(point.workload);
  alloc::SimulatedDevice device(point.device.capacity, point.device.total_memory);
  alloc::RunOptions options;
  options.stop_on_oom = true;
  options.cancel = cancel;
  options.progress = progress;
  if (point.device.allowed > 0)
    options.allowed_memory = point.device.allowed;
  LabellingSink sink(stream);
  const alloc::RunResult run =
      alloc::run_requests(stream, config, device, record_events ? &sink : nullptr, options);

  PointResult r;
  r.name = point.name;
  r.stats = run.stats;
  r.peak_allocated = run.peak_allocated;
  r.peak_reserved = run.peak_reserved;
  r.requests = stream.requests.size();
  r.estimated_step_time_ratio = estimated_step_time_ratio(point.workload);
  r.steps_completed = point.workload.training.steps;
  if (!run.ooms.empty()) {
    r.oom = true;
    r.oom_info = run.ooms.front();
    const std::size_t failing = r.oom_info->request_index;
    int step = -1;
    for (std::size_t i = 0; i < failing && i < stream.requests.size(); ++i)
      if (stream.requests[i].op == RequestOp::step_begin)
        step = static_cast<int>(stream.requests[i].size);
    r.oom_step = step;
    r.steps_completed = std::max(step, 0);
    if (failing < stream.requests.size())
      r.oom_label = stream.labels.at(stream.requests[failing].label.value);
  }
  if (record_events) {
    r.events = std::move(sink.events);
    r.event_labels = std::move(sink.labels);
    r.labels = stream.labels;
    r.step_first_events = step_first_events(stream, r.events);
  }
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

nlohmann::json to_json(const PointResult& r) {
  nlohmann::json stats = nlohmann::json::object();
  for (const auto& [key, value] : alloc::to_memory_stats(r.stats))
    stats[key] = value;
  nlohmann::json oom = nullptr;
  if (r.oom && r.oom_info) {
    const alloc::OutOfMemory& o = r.oom_info->oom;
    const auto inactive = r.stats.inactive_split_bytes[alloc::StatType::aggregate].current;
    oom = {{"request_index", r.oom_info->request_index},
           {"step", r.oom_step},
           {"requested", o.requested},
           {"rounded_size", o.rounded_size},
           {"tried_to_allocate", o.segment_size},
           {"allocated", o.allocated},
           {"reserved", o.reserved},
           {"inactive_split", inactive},
           {"device_total", o.device_total},
           {"device_free", o.device_free},
           {"allowed", o.allowed ? nlohmann::json(*o.allowed) : nlohmann::json(nullptr)},
           {"message", o.message}};
    if (r.oom_label) {
      oom["tensor"] = {{"category", std::string(to_string(r.oom_label->category))},
                       {"op", r.oom_label->op},
                       {"layer", r.oom_label->layer}};
    }
  }
  return {{"name", r.name},
          {"outcome", r.oom ? "oom" : "ok"},
          {"peak_allocated", r.peak_allocated},
          {"peak_reserved", r.peak_reserved},
          {"memory_stats", stats},
          {"oom", oom},
          {"steps_completed", r.steps_completed},
          {"estimated_step_time_ratio", r.estimated_step_time_ratio}};
}

}  // namespace fragscope::workload
