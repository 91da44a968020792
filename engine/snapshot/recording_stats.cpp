#include "engine/snapshot/recording_stats.h"

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/core/units.h"

namespace fragscope::snapshot {
namespace {

bool has_allowed_bytes(const nlohmann::json& stats) {
  const auto allowed = stats.find("allowed_bytes");
  return allowed != stats.end() && allowed->is_number_unsigned() && allowed->get<Bytes>() > 0;
}

// The fixture recorders' params.cap_gib as allowed_bytes, unless the document has its own. A cap
// no device has (beyond 2^63 bytes) is ignored rather than converted out of range.
void translate_fixture_cap(nlohmann::json& stats) {
  if (has_allowed_bytes(stats))
    return;
  const auto params = stats.find("params");
  if (params == stats.end() || !params->is_object())
    return;
  const auto cap = params->find("cap_gib");
  if (cap == params->end() || !cap->is_number())
    return;
  const double bytes = cap->get<double>() * static_cast<double>(kGiB);
  if (bytes > 0 && bytes < 9.2e18)
    stats["allowed_bytes"] = static_cast<Bytes>(bytes);
}

nlohmann::json checked_stats(nlohmann::json json, const std::string& source) {
  if (!json.is_object())
    throw InputError(source + ": expected a JSON object (the recording's memory_stats)");
  translate_fixture_cap(json);
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

}  // namespace fragscope::snapshot
