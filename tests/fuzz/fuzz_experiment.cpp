// libFuzzer target: experiment files, from bytes to resolved points. Any input is an Experiment
// or an InputError naming the file; a crash, a sanitizer report, another exception type, a hang or
// unbounded memory is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/workload/experiment.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto document = fragscope::parse_json_text(text, "fuzz.json");
    const auto experiment = fragscope::workload::parse_experiment(document, "fuzz.json");
    (void)fragscope::workload::select_points(experiment, std::nullopt, "fuzz.json");
  } catch (const fragscope::InputError&) {
  }
  return 0;
}
