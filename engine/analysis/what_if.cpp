#include "engine/analysis/what_if.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <limits>
#include <span>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/allocator/device.h"
#include "engine/allocator/run.h"
#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

std::string strip_spaces(std::string_view text) {
  std::string out;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c)))
      out += c;
  return out;
}

// A candidate: the baseline with one option changed (`change` edits the config, `option` is its
// PYTORCH_CUDA_ALLOC_CONF item). Its string is the canonical one of the result; a baseline no
// string expresses (a recorded value not in whole MiB) shows its own text with the option added.
template <typename Change>
Mitigation candidate(std::string name, const alloc::AllocatorConfig& baseline,
                     std::string_view option, Change change) {
  Mitigation m;
  m.name = std::move(name);
  m.config = baseline;
  change(m.config);
  m.config.warnings.clear();
  try {
    m.config.raw = alloc::to_alloc_conf_string(m.config);
  } catch (const alloc::AllocatorConfigError&) {
    m.config.raw =
        baseline.raw.empty() ? std::string(option) : baseline.raw + "," + std::string(option);
  }
  return m;
}

// Every request of a stream in order: visit(request, index).
template <typename Visit>
void for_each_request(const RequestStream& requests, Visit&& visit) {
  for (std::size_t i = 0; i < requests.requests.size(); ++i)
    visit(requests.requests[i], i);
}
template <typename Visit>
void for_each_request(const PackedRequests& requests, Visit&& visit) {
  requests.for_each_block([&](std::span<const Request> block, std::size_t first) {
    for (std::size_t i = 0; i < block.size(); ++i)
      visit(block[i], first + i);
    return true;
  });
}

// `requests_ideal` is ideal_peak(requests, options.initial_segments), computed once per sweep:
// it only depends on the stream, and every candidate that keeps the baseline stream shares it.
template <typename Requests>
alloc::RunResult run_with_progress(const Requests& requests, const Mitigation& candidate,
                                   const WhatIfOptions& options, alloc::EventSink* sink,
                                   Progress progress) {
  auto gpu = candidate_device(options);
  alloc::RunOptions run_options;
  run_options.allowed_memory = options.capacity;
  run_options.initial_segments = options.initial_segments;
  run_options.profile = candidate.profile ? *candidate.profile : options.profile;
  run_options.cancel = options.cancel;
  run_options.progress = std::move(progress);
  run_options.empty_cache_before = candidate.empty_cache_before;
  return alloc::run_requests(requests, candidate.config, gpu.device(), sink, run_options);
}

// A row's columns that come from its candidate, not from its run.
WhatIfRow row_header(Bytes requests_ideal, const Mitigation& m, const WhatIfOptions& options,
                     std::size_t index) {
  WhatIfRow row;
  row.candidate = index;
  row.name = m.name;
  row.alloc_conf = m.config.raw;
  row.step_time_ratio = m.step_time_ratio;
  row.torch_version = m.profile ? m.profile->version : options.profile.version;
  // Inserted empty_cache calls neither allocate nor free a tensor: they leave the ideal as it is.
  row.ideal_peak = m.requests ? ideal_peak(*m.requests, options.initial_segments) : requests_ideal;
  return row;
}

// The columns a run decides.
void fill_from_run(WhatIfRow& row, const alloc::RunResult& result) {
  row.ok = result.ooms.empty();
  if (!result.ooms.empty()) {
    row.first_oom_request = result.ooms.front().request_index;
    row.allocs_before_oom = result.ooms.front().allocs_before;
    row.oom_message = result.ooms.front().oom.message;
  }
  row.peak_reserved = result.peak_reserved;
  row.peak_allocated = result.peak_allocated;
  row.segment_allocs = result.device_calls.segment_allocs;
  row.segment_frees = result.device_calls.segment_frees;
  row.maps = result.device_calls.maps;
  row.unmaps = result.device_calls.unmaps;
  row.alloc_retries = result.stats.num_alloc_retries;
}

// `run` receives the candidate's run when it completed.
template <typename Requests>
WhatIfRow run_one(const Requests& requests, Bytes requests_ideal, const Mitigation& m,
                  const WhatIfOptions& options, std::size_t index, Progress progress,
                  std::optional<alloc::RunResult>& run) {
  WhatIfRow row = row_header(requests_ideal, m, options, index);
  if (!m.unavailable.empty()) {
    row.error = m.unavailable;
    return row;
  }
  try {
    if (m.requests)
      run = run_with_progress(*m.requests, m, options, nullptr, std::move(progress));
    else
      run = run_with_progress(requests, m, options, nullptr, std::move(progress));
    fill_from_run(row, *run);
  } catch (const Cancelled&) {
    row.error = "cancelled";  // run_what_if throws once the workers are done
  } catch (const std::exception& error) {
    row.ok = false;
    row.error = error.what();
  }
  return row;
}

// For each candidate that is another one plus a garbage_collection_threshold (that other one
// runs without the collector, on the same stream under the same release's rules, and both can
// run): the other one's index. Its run tells whether the collector would have released anything
// (collector_would_release); when not, both runs make the same decisions.
std::vector<std::optional<std::size_t>> collector_twins(const std::vector<Mitigation>& candidates) {
  std::vector<alloc::AllocatorConfig> without;  // each config with the threshold taken out
  without.reserve(candidates.size());
  for (const Mitigation& m : candidates) {
    alloc::AllocatorConfig c = m.config;
    c.garbage_collection_threshold = 0.0;
    c.raw.clear();
    c.warnings.clear();
    without.push_back(std::move(c));
  }
  std::vector<std::optional<std::size_t>> out(candidates.size());
  for (std::size_t j = 0; j < candidates.size(); ++j) {
    const Mitigation& twin = candidates[j];
    if (!(twin.config.garbage_collection_threshold > 0.0) || !twin.unavailable.empty())
      continue;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const Mitigation& base = candidates[i];
      if (base.config.garbage_collection_threshold == 0.0 && base.unavailable.empty() &&
          base.requests == twin.requests && base.empty_cache_before == twin.empty_cache_before &&
          base.profile == twin.profile && without[i] == without[j]) {
        out[j] = i;
        break;
      }
    }
  }
  return out;
}

// Whether a collector with `threshold` would have released memory in `run` (made without one):
// garbage_collect_cached_blocks does nothing while the bytes obtained from the device stay
// within threshold x allowed wherever it is called.
bool collector_would_release(const alloc::RunResult& run, double threshold) {
  if (!run.allowed_memory)
    return false;  // no limit: the collector is off
  const auto limit = static_cast<Bytes>(threshold * static_cast<double>(*run.allowed_memory));
  return run.gc_check_peak > limit;
}

}  // namespace

alloc::ReplayDevice candidate_device(const WhatIfOptions& options) {
  const Bytes device_memory = std::max(options.device_memory, options.capacity.value_or(0));
  return {options.recorded_segments, device_memory, std::max(options.device_total, device_memory)};
}

alloc::RunResult run_candidate(const RequestStream& requests, const Mitigation& candidate,
                               const WhatIfOptions& options, alloc::EventSink* sink) {
  return run_with_progress(requests, candidate, options, sink, options.progress);
}

namespace {

template <typename Requests>
std::vector<std::size_t> empty_cache_before_big_phase_of(const Requests& requests) {
  std::vector<std::size_t> steps;
  std::optional<std::size_t> largest;  // the first malloc of the largest size
  Bytes largest_size = 0;
  for_each_request(requests, [&](const Request& r, std::size_t i) {
    if (r.op == RequestOp::step_begin) {
      steps.push_back(i);
    } else if (r.op == RequestOp::malloc && (!largest || r.size > largest_size)) {
      largest = i;
      largest_size = r.size;
    }
  });
  if (steps.empty() && largest)
    steps.push_back(*largest);
  return steps;
}

template <typename Requests>
std::vector<Mitigation> standard_mitigations_of(const Requests& requests,
                                                const alloc::AllocatorConfig& baseline) {
  std::vector<Mitigation> out;
  Mitigation first;
  first.name = "baseline";
  first.config = baseline;
  out.push_back(std::move(first));
  out.push_back(candidate("expandable_segments", baseline, "expandable_segments:True",
                          [](alloc::AllocatorConfig& c) { c.expandable_segments = true; }));
  for (const Bytes mb : {64, 128, 256, 512}) {
    if (mb * kMiB < baseline.large_segment_size)
      continue;  // "max_split_size_mb must be >= large_segment_size_mb": PyTorch refuses it
    const std::string option = "max_split_size_mb:" + std::to_string(mb);
    out.push_back(candidate(option, baseline, option,
                            [mb](alloc::AllocatorConfig& c) { c.max_split_size = mb * kMiB; }));
  }
  for (const std::uint64_t divisions : {2, 4, 8, 16}) {
    const std::string option = "roundup_power2_divisions:" + std::to_string(divisions);
    out.push_back(candidate(option, baseline, option, [divisions](alloc::AllocatorConfig& c) {
      c.roundup_power2_divisions.fill(divisions);
    }));
  }
  constexpr std::pair<double, std::string_view> kThresholds[] = {
      {0.6, "garbage_collection_threshold:0.6"}, {0.8, "garbage_collection_threshold:0.8"}};
  for (const auto& threshold : kThresholds) {
    const double value = threshold.first;
    out.push_back(
        candidate(std::string(threshold.second), baseline, threshold.second,
                  [value](alloc::AllocatorConfig& c) { c.garbage_collection_threshold = value; }));
  }
  Mitigation empty_cache;
  empty_cache.name = "empty_cache before the big phase";
  empty_cache.config = baseline;
  empty_cache.empty_cache_before = empty_cache_before_big_phase_of(requests);
  out.push_back(std::move(empty_cache));
  return out;
}

}  // namespace

std::vector<std::size_t> empty_cache_before_big_phase(const RequestStream& requests) {
  return empty_cache_before_big_phase_of(requests);
}

std::vector<std::size_t> empty_cache_before_big_phase(const PackedRequests& requests) {
  return empty_cache_before_big_phase_of(requests);
}

std::vector<Mitigation> standard_mitigations(const RequestStream& requests,
                                             const alloc::AllocatorConfig& baseline) {
  return standard_mitigations_of(requests, baseline);
}

std::vector<Mitigation> standard_mitigations(const PackedRequests& requests,
                                             const alloc::AllocatorConfig& baseline) {
  return standard_mitigations_of(requests, baseline);
}

std::vector<Mitigation> release_mitigations(const alloc::AllocatorConfig& baseline,
                                            const std::vector<TorchVersion>& releases,
                                            TorchVersion current) {
  std::vector<Mitigation> out;
  for (const TorchVersion release : releases) {
    if (release == current)
      continue;
    Mitigation m;
    m.name = "PyTorch " + release.to_string() + "'s allocator";
    m.config = baseline;
    m.profile = alloc::allocator_profile(release);
    try {
      // What that release made of the same environment variable; the recorded effective values
      // the baseline carries stay, except the roundup table the release's parser builds.
      const alloc::AllocatorConfig parsed = alloc::parse_alloc_conf(baseline.raw, *m.profile);
      if (!baseline.raw.empty())
        m.config.roundup_power2_divisions = parsed.roundup_power2_divisions;
    } catch (const alloc::AllocatorConfigError& error) {
      m.unavailable = "PyTorch " + release.to_string() + " refuses PYTORCH_CUDA_ALLOC_CONF=\"" +
                      baseline.raw + "\": " + error.what();
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<TorchVersion> parse_release_list(std::string_view text, TorchVersion current) {
  std::vector<TorchVersion> out;
  const std::string list = strip_spaces(text);
  if (list == "newer" || list == "all") {
    for (const TorchVersion release : known_torch_versions())
      if (list == "all" ? release != current : release > current)
        out.push_back(release);
    return out;
  }
  std::string_view rest = list;
  while (!rest.empty() || out.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const std::optional<TorchVersion> release = TorchVersion::parse(item);
    if (!release || *release < kOldestTorch || *release > kLatestTorch)
      throw InputError("--what-if-releases '" + std::string(text) + "': '" + std::string(item) +
                       "' is not a release from " + kOldestTorch.to_string() + " to " +
                       kLatestTorch.to_string() + " (X.Y), \"newer\" or \"all\"");
    if (std::find(out.begin(), out.end(), *release) == out.end())
      out.push_back(*release);
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  return out;
}

namespace {

template <typename Requests>
Bytes ideal_peak_of(const Requests& requests, const std::vector<alloc::SeedSegment>& initial) {
  std::unordered_map<std::uint64_t, Bytes> live;
  live.reserve(1024);
  Bytes current = 0;
  for (const alloc::SeedSegment& segment : initial) {
    for (const alloc::SeedBlock& block : segment.blocks) {
      if (block.state != BlockState::active_allocated)
        continue;  // a pending free is no longer the program's
      live[block.tensor.value] = block.requested_size;
      current += block.requested_size;
    }
  }
  Bytes peak = current;
  for_each_request(requests, [&](const Request& r, std::size_t) {
    if (r.op == RequestOp::malloc) {
      live[r.tensor.value] = r.size;
      current += r.size;
      peak = std::max(peak, current);
    } else if (r.op == RequestOp::free) {
      auto it = live.find(r.tensor.value);
      if (it != live.end()) {
        current -= it->second;
        live.erase(it);
      }
    }
  });
  return peak;
}

}  // namespace

Bytes ideal_peak(const RequestStream& requests, const std::vector<alloc::SeedSegment>& initial) {
  return ideal_peak_of(requests, initial);
}

Bytes ideal_peak(const PackedRequests& requests, const std::vector<alloc::SeedSegment>& initial) {
  return ideal_peak_of(requests, initial);
}

double WhatIfRow::distance_from_ideal() const {
  return ideal_peak == 0 ? 0.0
                         : static_cast<double>(peak_reserved) / static_cast<double>(ideal_peak);
}

const WhatIfRow* WhatIfTable::baseline() const {
  for (const auto& row : rows)
    if (row.candidate == 0)
      return &row;
  return nullptr;
}

std::size_t what_if_memory_budget(std::uint64_t input_bytes) {
  return static_cast<std::size_t>(std::max<std::uint64_t>(input_bytes / 5, 1));
}

namespace {

// The threads a sweep runs on: options.threads (0: the hardware's), at most one a candidate, and
// no more than options.memory_budget holds runs of the largest state any candidate's run has.
template <typename Requests>
unsigned sweep_threads(const Requests& requests, const std::vector<Mitigation>& candidates,
                       const WhatIfOptions& options) {
  unsigned threads = options.threads == 0 ? std::thread::hardware_concurrency() : options.threads;
  threads = std::clamp<unsigned>(
      threads, 1, static_cast<unsigned>(std::max<std::size_t>(candidates.size(), 1)));
  if (options.memory_budget == 0 || threads == 1)
    return threads;
  alloc::RunOptions run_options;
  run_options.initial_segments = options.initial_segments;
  std::size_t run_bytes = alloc::run_state_bytes(requests, run_options);
  for (const Mitigation& m : candidates) {
    if (!m.requests && m.empty_cache_before.empty())
      continue;  // runs the baseline stream: run_bytes
    run_options.empty_cache_before = m.empty_cache_before;
    run_bytes = std::max(run_bytes, m.requests ? alloc::run_state_bytes(*m.requests, run_options)
                                               : alloc::run_state_bytes(requests, run_options));
  }
  const std::size_t fit = options.memory_budget / std::max<std::size_t>(run_bytes, 1);
  return static_cast<unsigned>(std::clamp<std::size_t>(fit, 1, threads));
}

template <typename Requests>
WhatIfTable run_what_if_of(const Requests& requests, const std::vector<Mitigation>& candidates,
                           const WhatIfOptions& options) {
  WhatIfTable table;
  table.capacity = options.capacity;
  table.ideal_peak = ideal_peak(requests, options.initial_segments);
  std::vector<WhatIfRow> rows(candidates.size());
  std::vector<std::optional<alloc::RunResult>> runs(candidates.size());

  const unsigned threads = sweep_threads(requests, candidates, options);
  PartsProgress progress(options.progress, kWhatIfStages[0].name, candidates.size());
  progress.start();
  // Runs the candidates `order` lists on the worker threads; results land in their slots.
  auto run_all = [&](const std::vector<std::size_t>& order) {
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t k = next++; k < order.size() && !options.cancel.cancelled(); k = next++) {
        const std::size_t i = order[k];
        rows[i] = run_one(requests, table.ideal_peak, candidates[i], options, i, progress.part(i),
                          runs[i]);
        if (!options.cancel.cancelled())
          progress.set(i, 1);
      }
    };
    std::vector<std::jthread> pool;
    const auto helpers = std::min<std::size_t>(threads, std::max<std::size_t>(order.size(), 1));
    for (std::size_t t = 1; t < helpers; ++t)
      pool.emplace_back(work);
    work();
  };
  // A candidate that only adds a garbage_collection_threshold to another waits for that one's
  // run: when the collector would not have released anything there, it is the same run.
  const auto twins = collector_twins(candidates);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (!twins[i])
      order.push_back(i);
  run_all(order);
  order.clear();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!twins[i])
      continue;
    const std::optional<alloc::RunResult>& base = runs[*twins[i]];
    if (!base ||
        collector_would_release(*base, candidates[i].config.garbage_collection_threshold)) {
      order.push_back(i);
      continue;
    }
    rows[i] = row_header(table.ideal_peak, candidates[i], options, i);
    fill_from_run(rows[i], *base);
    progress.set(i, 1);
  }
  run_all(order);
  options.cancel.throw_if_cancelled();

  if (!rows.empty()) {
    const auto base_calls = static_cast<std::int64_t>(rows.front().device_calls());
    for (auto& row : rows)
      row.extra_device_calls = static_cast<std::int64_t>(row.device_calls()) - base_calls;
  }
  // Among candidates that still run out of memory, the one that gets further is better (its
  // lower peak reserved only reflects stopping earlier).
  auto key = [](const WhatIfRow& r) {
    const std::size_t stopped_before =
        r.ok ? 0 : std::numeric_limits<std::size_t>::max() - r.allocs_before_oom;
    return std::make_tuple(r.error.empty() ? 0 : 1, r.ok ? 0 : 1, stopped_before, r.peak_reserved,
                           r.extra_device_calls, r.step_time_ratio, r.candidate);
  };
  std::sort(rows.begin(), rows.end(),
            [&](const WhatIfRow& a, const WhatIfRow& b) { return key(a) < key(b); });
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows[i].rank = i + 1;
  table.rows = std::move(rows);
  return table;
}

}  // namespace

WhatIfTable run_what_if(const RequestStream& requests, const std::vector<Mitigation>& candidates,
                        const WhatIfOptions& options) {
  return run_what_if_of(requests, candidates, options);
}

WhatIfTable run_what_if(const PackedRequests& requests, const std::vector<Mitigation>& candidates,
                        const WhatIfOptions& options) {
  return run_what_if_of(requests, candidates, options);
}

nlohmann::json to_json(const WhatIfRow& row) {
  nlohmann::json j = {{"rank", row.rank},
                      {"name", row.name},
                      {"alloc_conf", row.alloc_conf},
                      {"torch_version", row.torch_version.to_string()},
                      {"ok", row.ok},
                      {"peak_reserved", row.peak_reserved},
                      {"peak_allocated", row.peak_allocated},
                      {"ideal_peak", row.ideal_peak},
                      {"distance_from_ideal", row.distance_from_ideal()},
                      {"segment_allocs", row.segment_allocs},
                      {"segment_frees", row.segment_frees},
                      {"maps", row.maps},
                      {"unmaps", row.unmaps},
                      {"device_calls", row.device_calls()},
                      {"extra_device_calls", row.extra_device_calls},
                      {"alloc_retries", row.alloc_retries},
                      {"step_time_ratio", row.step_time_ratio}};
  j["allocs_before_oom"] = row.allocs_before_oom;
  j["first_oom_request"] =
      row.first_oom_request ? nlohmann::json(*row.first_oom_request) : nlohmann::json(nullptr);
  if (!row.oom_message.empty())
    j["oom_message"] = row.oom_message;
  if (!row.error.empty())
    j["error"] = row.error;
  return j;
}

nlohmann::json to_json(const WhatIfTable& table) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : table.rows)
    rows.push_back(to_json(row));
  return {{"ideal_peak", table.ideal_peak},
          {"capacity", table.capacity ? nlohmann::json(*table.capacity) : nlohmann::json(nullptr)},
          {"best", table.best() ? nlohmann::json(table.best()->name) : nlohmann::json(nullptr)},
          {"rows", std::move(rows)}};
}

}  // namespace fragscope::analysis
