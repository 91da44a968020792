#include "engine/analysis/metrics.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/snapshot/event_spool.h"

namespace fragscope::analysis {
namespace {

void count_call(DeviceCalls& calls, TraceAction action) {
  switch (action) {
    case TraceAction::segment_alloc:
      ++calls.segment_allocs;
      break;
    case TraceAction::segment_free:
      ++calls.segment_frees;
      break;
    case TraceAction::segment_map:
      ++calls.maps;
      break;
    case TraceAction::segment_unmap:
      ++calls.unmaps;
      break;
    default:
      break;
  }
}

}  // namespace

DeviceCalls& DeviceCalls::operator+=(const DeviceCalls& other) {
  segment_allocs += other.segment_allocs;
  segment_frees += other.segment_frees;
  maps += other.maps;
  unmaps += other.unmaps;
  return *this;
}

double RunMetrics::gmlake_fragmentation() const {
  if (peak.reserved == 0)
    return 0.0;
  return 1.0 - static_cast<double>(peak.active) / static_cast<double>(peak.reserved);
}

MemorySample sample_of(const snapshot::SegmentState& state) {
  return state.sample();
}

std::vector<FreeBlock> free_blocks(const snapshot::SegmentState& state) {
  std::vector<FreeBlock> result;
  for (const auto& [segment_address, info] : state.segment_map()) {
    for (const auto& [address, block] : state.blocks_of(segment_address)) {
      if (block.state == snapshot::BlockState::inactive)
        result.push_back(FreeBlock{address, block.size, info.stream, info.pool,
                                   !info.expandable && info.block_count > 1});
    }
  }
  return result;
}

std::vector<FreeSpace> summarize_free(std::span<const FreeBlock> blocks) {
  std::map<std::pair<StreamId, alloc::PoolKind>, FreeSpace> by_key;
  for (const FreeBlock& block : blocks) {
    FreeSpace& space = by_key[{block.stream, block.pool}];
    space.stream = block.stream;
    space.pool = block.pool;
    space.free_bytes += block.size;
    space.largest_block = std::max(space.largest_block, block.size);
    ++space.blocks;
    if (block.in_split_segment)
      space.in_split_segments += block.size;
  }
  std::vector<FreeSpace> result;
  result.reserve(by_key.size());
  for (auto& [key, space] : by_key)
    result.push_back(space);
  return result;
}

std::vector<FreeSpace> free_space(const snapshot::SegmentState& state) {
  return summarize_free(free_blocks(state));
}

MetricsRecorder::MetricsRecorder(snapshot::SegmentState initial)
    : MetricsRecorder(std::move(initial), Options{}) {}

MetricsRecorder::MetricsRecorder(snapshot::SegmentState initial, Options options)
    : options_(options), state_(std::move(initial)) {
  metrics_.initial = sample_of(state_);
  metrics_.final = metrics_.initial;
  metrics_.peak = metrics_.initial;
  metrics_.at_peak_reserved = metrics_.initial;
  metrics_.free_at_peak_reserved = free_space(state_);
  metrics_.max_external_fragmentation = metrics_.initial.external_fragmentation();
}

void MetricsRecorder::apply(const TraceEvent& event) {
  const std::size_t index = metrics_.events;
  try {
    state_.apply(event);
  } catch (const InputError& error) {
    throw InputError("event " + std::to_string(index) + ": " + error.what());
  }
  const MemorySample s = sample_of(state_);
  const Bytes previous_peak_reserved = metrics_.peak.reserved;
  take_max(metrics_.peak, s);
  if (s.reserved > previous_peak_reserved) {
    metrics_.peak_reserved_event = index;
    metrics_.at_peak_reserved = s;
    metrics_.free_at_peak_reserved = free_space(state_);
  }
  const double external = s.external_fragmentation();
  if (external > metrics_.max_external_fragmentation) {
    metrics_.max_external_fragmentation = external;
    metrics_.max_external_fragmentation_event = index;
  }
  count_call(metrics_.device_calls, event.action);
  if (event.action == TraceAction::alloc)
    ++metrics_.allocs;
  if (event.action == TraceAction::oom)
    ++metrics_.ooms;
  if (step_) {
    take_max(step_->peak, s);
    count_call(step_->device_calls, event.action);
    if (event.action == TraceAction::alloc) {
      ++step_->allocs;
      step_->bytes_allocated += event.size;
    } else if (event.action == TraceAction::free_completed) {
      ++step_->frees;
    }
  }
  if (options_.keep_samples)
    metrics_.samples.push_back(s);
  metrics_.final = s;
  ++metrics_.events;
}

void MetricsRecorder::close_step() {
  if (!step_)
    return;
  step_->end_event = metrics_.events;
  metrics_.steps.push_back(*step_);
  step_.reset();
}

void MetricsRecorder::begin_step(std::uint64_t step) {
  close_step();
  StepMetrics next;
  next.step = step;
  next.first_event = metrics_.events;
  next.peak = sample_of(state_);  // a step's peak includes what it starts with
  step_ = next;
}

RunMetrics MetricsRecorder::finish() {
  close_step();
  if (options_.keep_samples)
    metrics_.buckets = bucket_samples(metrics_.samples, options_.buckets);
  return std::move(metrics_);
}

RunMetrics measure_trace(std::span<const TraceEvent> events, snapshot::SegmentState initial,
                         MetricsRecorder::Options options, std::span<const StepStart> step_starts) {
  return measure_trace(snapshot::TraceBlocks(events), std::move(initial), options, step_starts);
}

RunMetrics measure_trace(const snapshot::TraceBlocks& events, snapshot::SegmentState initial,
                         MetricsRecorder::Options options, std::span<const StepStart> step_starts) {
  MetricsRecorder recorder(std::move(initial), options);
  std::size_t next_step = 0;
  events.for_each([&](const TraceEvent& event, std::size_t i) {
    while (next_step < step_starts.size() && step_starts[next_step].event <= i)
      recorder.begin_step(step_starts[next_step++].step);
    recorder.apply(event);
  });
  while (next_step < step_starts.size())
    recorder.begin_step(step_starts[next_step++].step);
  return recorder.finish();
}

std::vector<MetricsBucket> bucket_samples(std::span<const MemorySample> samples,
                                          std::size_t count) {
  std::vector<MetricsBucket> buckets;
  if (samples.empty() || count == 0)
    return buckets;
  count = std::min(count, samples.size());
  buckets.reserve(count);
  for (std::size_t b = 0; b < count; ++b) {
    // Integer partition: bucket b covers [b*n/count, (b+1)*n/count).
    const std::size_t first = b * samples.size() / count;
    const std::size_t end = (b + 1) * samples.size() / count;
    MetricsBucket bucket;
    bucket.first = first;
    bucket.last = end - 1;
    for (std::size_t i = first; i < end; ++i) {
      take_max(bucket.max, samples[i]);
      bucket.max_external_fragmentation =
          std::max(bucket.max_external_fragmentation, samples[i].external_fragmentation());
    }
    buckets.push_back(bucket);
  }
  return buckets;
}

nlohmann::json to_json(const MemorySample& s) {
  return {{"allocated", s.allocated},
          {"reserved", s.reserved},
          {"active", s.active},
          {"requested", s.requested},
          {"cached_unused", s.cached_unused()},
          {"cached_free", s.cached_free()},
          {"inactive_split", s.inactive_split},
          {"largest_free", s.largest_free},
          {"external_fragmentation", s.external_fragmentation()},
          {"rounding_waste", s.rounding_waste()},
          {"segments", s.segments}};
}

nlohmann::json to_json(const FreeSpace& space) {
  return {{"stream", space.stream.value},   {"pool", to_string(space.pool)},
          {"free_bytes", space.free_bytes}, {"largest_block", space.largest_block},
          {"blocks", space.blocks},         {"in_split_segments", space.in_split_segments}};
}

namespace {
nlohmann::json to_json(const DeviceCalls& calls) {
  return {{"segment_allocs", calls.segment_allocs},
          {"segment_frees", calls.segment_frees},
          {"maps", calls.maps},
          {"unmaps", calls.unmaps}};
}
}  // namespace

nlohmann::json to_json(const RunMetrics& m) {
  nlohmann::json free = nlohmann::json::array();
  for (const auto& space : m.free_at_peak_reserved)
    free.push_back(to_json(space));
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : m.buckets) {
    nlohmann::json row = to_json(b.max);
    row["first"] = b.first;
    row["last"] = b.last;
    row["external_fragmentation"] = b.max_external_fragmentation;
    buckets.push_back(std::move(row));
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : m.steps) {
    steps.push_back({{"step", s.step},
                     {"first_event", s.first_event},
                     {"end_event", s.end_event},
                     {"peak", to_json(s.peak)},
                     {"allocs", s.allocs},
                     {"frees", s.frees},
                     {"bytes_allocated", s.bytes_allocated},
                     {"device_calls", to_json(s.device_calls)}});
  }
  return {{"events", m.events},
          {"peak", to_json(m.peak)},
          {"final", to_json(m.final)},
          {"peak_reserved_event", m.peak_reserved_event},
          {"at_peak_reserved", to_json(m.at_peak_reserved)},
          {"free_at_peak_reserved", std::move(free)},
          {"gmlake_fragmentation", m.gmlake_fragmentation()},
          {"max_external_fragmentation", m.max_external_fragmentation},
          {"max_external_fragmentation_event", m.max_external_fragmentation_event},
          {"ideal_lower_bound", m.ideal_lower_bound()},
          {"device_calls", to_json(m.device_calls)},
          {"allocs", m.allocs},
          {"ooms", m.ooms},
          {"buckets", std::move(buckets)},
          {"steps", std::move(steps)}};
}

}  // namespace fragscope::analysis
