#include "storage/db/recording_stats.h"

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/core/units.h"

namespace fragscope::storage {
namespace {

std::string string_field(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
}

nlohmann::json checked_stats(nlohmann::json json, const std::string& source) {
  if (!json.is_object())
    throw InputError(source + ": expected a JSON object (the recording's memory_stats)");
  return json;
}

}  // namespace

nlohmann::json parse_recording_stats(std::string_view text, const std::string& source) {
  return checked_stats(parse_json_text(text, source), source);
}

nlohmann::json read_recording_stats(const std::string& stats_path) {
  // Regular files only (a FIFO would block), bounded nesting (copies of the document recurse).
  return checked_stats(read_json_file(stats_path, "stats file"), stats_path);
}

void apply_recorded_environment(const nlohmann::json& stats, Environment& environment) {
  environment.torch_version = string_field(stats, "torch");
  environment.cuda_version = string_field(stats, "cuda");
  environment.gpu_name = string_field(stats, "device");
  if (const auto total = stats.find("total_memory");
      total != stats.end() && total->is_number_unsigned())
    environment.gpu_memory = total->get<Bytes>();
}

void add_recorded_stats(const nlohmann::json& stats, nlohmann::json& summary) {
  // What PyTorch itself reported after the run, shown beside FragScope's figures.
  if (const auto it = stats.find("memory_stats"); it != stats.end() && it->is_object())
    summary["memory_stats"] = *it;
  if (const auto it = stats.find("outcome"); it != stats.end())
    summary["recorded_outcome"] = *it;
  if (const auto it = stats.find("alloc_conf"); it != stats.end())
    summary["recorded_alloc_conf"] = *it;
  // fragscope-record's optimizer-step end times (the trace's clock, µs since the epoch): a job's
  // ranks line up by training step with them.
  if (const auto it = stats.find("step_ends_us"); it != stats.end() && it->is_array()) {
    nlohmann::json ends = nlohmann::json::array();
    for (const nlohmann::json& t : *it)
      if (t.is_number_unsigned() || (t.is_number_integer() && t.get<std::int64_t>() >= 0))
        ends.push_back(t.get<std::uint64_t>());
    summary["step_ends_us"] = std::move(ends);
  }
  // record_torch_traces.py's cap: set_per_process_memory_fraction to exactly cap_gib GiB. A cap
  // no device has (beyond 2^63 bytes) is ignored rather than converted out of range.
  const auto params = stats.find("params");
  if (params != stats.end() && params->is_object()) {
    const auto cap = params->find("cap_gib");
    if (cap != params->end() && cap->is_number()) {
      const double bytes = cap->get<double>() * static_cast<double>(kGiB);
      if (bytes > 0 && bytes < 9.2e18)
        summary["allowed_bytes"] = static_cast<Bytes>(bytes);
    }
  }
  // fragscope-record's cap: the allocator's own limit (fraction x device total) as recorded.
  if (const auto allowed = stats.find("allowed_bytes");
      allowed != stats.end() && allowed->is_number_unsigned() && allowed->get<Bytes>() > 0)
    summary["allowed_bytes"] = allowed->get<Bytes>();
}

}  // namespace fragscope::storage
