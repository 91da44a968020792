#include "storage/db/recording_stats.h"

namespace fragscope::storage {
namespace {

std::string string_field(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

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
  // The per-process cap: the allocator's own limit (fraction x device total) as recorded.
  if (const auto allowed = stats.find("allowed_bytes");
      allowed != stats.end() && allowed->is_number_unsigned() && allowed->get<Bytes>() > 0)
    summary["allowed_bytes"] = allowed->get<Bytes>();
}

}  // namespace fragscope::storage
