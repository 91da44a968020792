#include "engine/analysis/compare.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/allocator/summary.h"
#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

std::string format_value(const std::optional<double>& value, const std::string& unit) {
  if (!value)
    return "-";
  char text[64];
  if (unit == "bytes")
    return alloc::format_size(static_cast<Bytes>(*value));
  if (unit == "count") {
    std::snprintf(text, sizeof text, "%.0f", *value);
    return text;
  }
  std::snprintf(text, sizeof text, unit == "x" ? "%.3fx" : "%.4f", *value);
  return text;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width)
    text.append(width - text.size(), ' ');
  return text;
}

}  // namespace

std::vector<StepStart> allocation_phases(std::span<const std::size_t> alloc_event_index,
                                         std::size_t phases) {
  std::vector<StepStart> starts;
  if (alloc_event_index.empty() || phases == 0)
    return starts;
  phases = std::min(phases, alloc_event_index.size());
  for (std::size_t p = 0; p < phases; ++p) {
    const std::size_t alloc = p * alloc_event_index.size() / phases;
    // The first phase also takes the events before the first allocation.
    starts.push_back(StepStart{p, p == 0 ? 0 : alloc_event_index[alloc]});
  }
  return starts;
}

bool measure_run(RunProfile& profile, std::span<const TraceEvent> events,
                 const snapshot::SegmentState& initial, std::size_t phases) {
  profile.alloc_event_index.clear();
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].action == TraceAction::alloc)
      profile.alloc_event_index.push_back(i);
  const auto starts = allocation_phases(profile.alloc_event_index, phases);
  try {
    profile.metrics = measure_trace(events, initial, {.keep_samples = false, .buckets = 0}, starts);
    profile.series_only = false;
    return true;
  } catch (const InputError&) {
    RunMetrics counted;
    counted.events = events.size();
    for (const TraceEvent& e : events) {
      switch (e.action) {
        case TraceAction::segment_alloc:
          ++counted.device_calls.segment_allocs;
          break;
        case TraceAction::segment_free:
          ++counted.device_calls.segment_frees;
          break;
        case TraceAction::segment_map:
          ++counted.device_calls.maps;
          break;
        case TraceAction::segment_unmap:
          ++counted.device_calls.unmaps;
          break;
        case TraceAction::alloc:
          ++counted.allocs;
          break;
        case TraceAction::oom:
          ++counted.ooms;
          break;
        default:
          break;
      }
    }
    profile.metrics = std::move(counted);
    profile.series_only = true;
    return false;
  }
}

Comparison compare_runs(std::span<const RunProfile> profiles) {
  Comparison c;
  for (const auto& p : profiles)
    c.runs.push_back(p.label);

  auto add = [&](std::string name, std::string unit, auto value_of) {
    MetricRow row{std::move(name), std::move(unit), {}};
    for (const auto& p : profiles)
      row.values.push_back(value_of(p));
    c.metrics.push_back(std::move(row));
  };
  using Opt = std::optional<double>;
  auto bytes = [](Bytes b) { return Opt(static_cast<double>(b)); };
  auto layout = [](const RunProfile& p, double v) { return p.series_only ? Opt() : Opt(v); };
  add("peak allocated", "bytes",
      [&](const RunProfile& p) { return bytes(p.metrics.peak.allocated); });
  add("peak reserved", "bytes",
      [&](const RunProfile& p) { return bytes(p.metrics.peak.reserved); });
  add("peak active", "bytes", [&](const RunProfile& p) { return bytes(p.metrics.peak.active); });
  add("peak requested (ideal)", "bytes",
      [&](const RunProfile& p) { return bytes(p.metrics.peak.requested); });
  add("reserved / ideal", "x", [](const RunProfile& p) {
    return p.metrics.peak.requested == 0 ? Opt()
                                         : Opt(static_cast<double>(p.metrics.peak.reserved) /
                                               static_cast<double>(p.metrics.peak.requested));
  });
  add("GMLake fragmentation (1 - peak active / peak reserved)", "ratio",
      [](const RunProfile& p) { return Opt(p.metrics.gmlake_fragmentation()); });
  add("peak inactive split (non-releasable)", "bytes", [&](const RunProfile& p) {
    return layout(p, static_cast<double>(p.metrics.peak.inactive_split));
  });
  add("external fragmentation at peak reserved", "ratio", [&](const RunProfile& p) {
    return layout(p, p.metrics.at_peak_reserved.external_fragmentation());
  });
  add("max external fragmentation", "ratio",
      [&](const RunProfile& p) { return layout(p, p.metrics.max_external_fragmentation); });
  add("OOMs", "count",
      [](const RunProfile& p) { return Opt(static_cast<double>(p.metrics.ooms)); });
  add("alloc retries", "count", [](const RunProfile& p) {
    return p.alloc_retries ? Opt(static_cast<double>(*p.alloc_retries)) : Opt();
  });
  add("peak segments (cudaMalloc'd)", "count",
      [&](const RunProfile& p) { return layout(p, static_cast<double>(p.metrics.peak.segments)); });
  add("cudaMalloc", "count", [](const RunProfile& p) {
    return Opt(static_cast<double>(p.metrics.device_calls.segment_allocs));
  });
  add("cudaFree", "count", [](const RunProfile& p) {
    return Opt(static_cast<double>(p.metrics.device_calls.segment_frees));
  });
  add("page maps + unmaps", "count", [](const RunProfile& p) {
    return Opt(static_cast<double>(p.metrics.device_calls.maps + p.metrics.device_calls.unmaps));
  });
  add("estimated step time", "x", [](const RunProfile& p) { return Opt(p.estimated_step_time); });

  // Phases, when every run was cut the same way.
  bool aligned = !profiles.empty();
  for (const auto& p : profiles) {
    if (p.alloc_event_index.size() != profiles.front().alloc_event_index.size() ||
        p.metrics.steps.size() != profiles.front().metrics.steps.size() || p.metrics.steps.empty())
      aligned = false;
  }
  if (aligned) {
    c.phase_alignment = std::to_string(profiles.front().metrics.steps.size()) +
                        " phases of equal allocation counts (" +
                        std::to_string(profiles.front().alloc_event_index.size()) +
                        " allocations in every run)";
    for (std::size_t i = 0; i < profiles.front().metrics.steps.size(); ++i) {
      PhaseRow row;
      row.phase = i;
      for (const auto& p : profiles) {
        const StepMetrics& s = p.metrics.steps[i];
        row.peak_reserved.push_back(s.peak.reserved);
        row.peak_allocated.push_back(s.peak.allocated);
        row.device_calls.push_back(s.device_calls.total());
      }
      c.phases.push_back(std::move(row));
    }
  } else {
    c.phase_alignment =
        "not aligned: the runs made different numbers of allocations (different requests)";
  }

  // Conditions that differ.
  if (profiles.size() >= 2) {
    const RunProfile& first = profiles.front();
    for (std::size_t i = 1; i < profiles.size(); ++i) {
      const RunProfile& other = profiles[i];
      if (other.alloc_conf != first.alloc_conf)
        c.warnings.push_back("allocator config differs: " + first.label + " \"" + first.alloc_conf +
                             "\" vs " + other.label + " \"" + other.alloc_conf + "\"");
      if (first.capacity != 0 && other.capacity != 0 && first.capacity != other.capacity)
        c.warnings.push_back("capacity differs: " + first.label + " " +
                             alloc::format_size(first.capacity) + " vs " + other.label + " " +
                             alloc::format_size(other.capacity));
      const bool fingerprinted = first.recorded_environment && other.recorded_environment;
      if (fingerprinted)
        for (std::string& warning : environment_warnings(first.label, *first.recorded_environment,
                                                         other.label, *other.recorded_environment))
          c.warnings.push_back(std::move(warning));
      for (const auto& [key, value] : first.environment) {
        // The fingerprints compared the build, driver and GPU already, more precisely.
        if (fingerprinted && key != "fragscope")
          continue;
        auto it = other.environment.find(key);
        if (value.empty() || it == other.environment.end() || it->second.empty())
          continue;
        if (it->second != value)
          c.warnings.push_back("environment differs (" + key + "): " + first.label + " \"" + value +
                               "\" vs " + other.label + " \"" + it->second + "\"");
      }
    }
  }
  for (const auto& p : profiles)
    if (p.series_only)
      c.warnings.push_back(p.label +
                           ": the segment layout could not be rebuilt from its events; only the "
                           "series peaks and device calls are compared");
  return c;
}

nlohmann::json to_json(const Comparison& c) {
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& row : c.metrics) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& v : row.values)
      values.push_back(v ? nlohmann::json(*v) : nlohmann::json(nullptr));
    metrics.push_back({{"name", row.name}, {"unit", row.unit}, {"values", std::move(values)}});
  }
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : c.phases)
    phases.push_back({{"phase", p.phase},
                      {"peak_reserved", p.peak_reserved},
                      {"peak_allocated", p.peak_allocated},
                      {"device_calls", p.device_calls}});
  return {{"runs", c.runs},
          {"metrics", std::move(metrics)},
          {"phase_alignment", c.phase_alignment},
          {"phases", std::move(phases)},
          {"warnings", c.warnings}};
}

std::string to_text(const Comparison& c) {
  constexpr std::size_t kNameWidth = 56;
  std::size_t value_width = 18;
  for (const auto& run : c.runs)
    value_width = std::max(value_width, run.size() + 2);
  std::ostringstream out;
  out << pad("metric", kNameWidth);
  for (const auto& run : c.runs)
    out << pad(run, value_width);
  out << "\n";
  for (const auto& row : c.metrics) {
    out << pad(row.name, kNameWidth);
    for (const auto& v : row.values)
      out << pad(format_value(v, row.unit), value_width);
    out << "\n";
  }
  out << "phases: " << c.phase_alignment << "\n";
  for (const auto& p : c.phases) {
    out << pad("  phase " + std::to_string(p.phase) + " peak reserved", kNameWidth);
    for (Bytes b : p.peak_reserved)
      out << pad(alloc::format_size(b), value_width);
    out << "\n";
  }
  for (const auto& w : c.warnings)
    out << "warning: " << w << "\n";
  return out.str();
}

}  // namespace fragscope::analysis
