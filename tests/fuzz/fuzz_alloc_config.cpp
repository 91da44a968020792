// libFuzzer target: the PYTORCH_CUDA_ALLOC_CONF parser and the snapshot's allocator_settings
// dict. Any string is a config or an AllocatorConfigError; a config that to_alloc_conf_string
// can express parses back to the same options. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/allocator/config.h"
#include "engine/core/error.h"

namespace {

void check_round_trip(const fragscope::alloc::AllocatorConfig& config) {
  using fragscope::alloc::AllocatorConfig;
  std::string text;
  try {
    text = fragscope::alloc::to_alloc_conf_string(config);
  } catch (const fragscope::alloc::AllocatorConfigError&) {
    return;  // no string expresses it; documented
  }
  AllocatorConfig again = AllocatorConfig::parse(text);
  AllocatorConfig original = config;
  again.raw = original.raw = "";
  again.warnings = original.warnings = "";
  if (!(again == original))
    std::abort();  // the canonical string does not give back the same options
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fragscope::alloc::AllocatorConfig;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_round_trip(AllocatorConfig::parse(text));
  } catch (const fragscope::alloc::AllocatorConfigError&) {
  } catch (const fragscope::InputError&) {
  }
  // The same bytes as an allocator_settings dict (a snapshot's), when they are JSON.
  const nlohmann::json settings = nlohmann::json::parse(text, nullptr, false);
  if (!settings.is_discarded()) {
    try {
      (void)fragscope::alloc::config_from_allocator_settings(settings);
    } catch (const fragscope::alloc::AllocatorConfigError&) {
    } catch (const fragscope::InputError&) {
    }
  }
  return 0;
}
