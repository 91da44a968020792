// libFuzzer target: a recording's companion NAME.stats.json, as import reads it: parsed with
// bounded nesting, then the environment and summary fields taken from it. Any input is used or
// an InputError naming the file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/core/error.h"
#include "engine/snapshot/recording_stats.h"
#include "storage/db/recording_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fragscope::storage;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto stats = fragscope::snapshot::parse_recording_stats(text, "fuzz.stats.json");
    Environment environment;
    apply_recorded_environment(stats, environment);
    nlohmann::json summary = nlohmann::json::object();
    add_recorded_stats(stats, summary);
    (void)summary.dump();
  } catch (const fragscope::InputError&) {
  }
  return 0;
}
