// libFuzzer target: fragscope-record's NAME.env.json (the environment fingerprint), as import
// and `fragscope-cli env` read it: parsed with bounded nesting, read into a RecordedEnvironment,
// then everything that prints or compares one. Any input is used or an InputError naming the
// file; a crash, a sanitizer report, another exception type or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "engine/core/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fragscope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto json = parse_json_text(text, "fuzz.env.json");
    const auto env = analysis::parse_recorded_environment(json, "fuzz.env.json");
    (void)analysis::describe_torch(env);
    (void)analysis::to_text(env);
    (void)analysis::environment_yml(env, "fuzz");
    (void)analysis::diff_environments(env, analysis::RecordedEnvironment{});
    (void)analysis::environment_warnings("#1", env, "#2", env);
  } catch (const InputError&) {
  }
  return 0;
}
