// libFuzzer target: a Hugging Face config.json, as an experiment's "model": {"hf_config": PATH}
// reads it: parsed with bounded nesting, then turned into a model (architecture, sizes, the
// bounds every field must be within). Any input is a model or an InputError naming the file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/workload/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fragscope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto json = parse_json_text(text, "fuzz.config.json");
    (void)workload::model_from_hf_config(json, "fuzz.config.json");
  } catch (const InputError&) {
  }
  return 0;
}
