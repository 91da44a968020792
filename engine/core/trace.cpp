#include "engine/core/trace.h"

#include <array>

namespace fragscope {
namespace {
constexpr std::array<std::string_view, kTraceActionCount> kActionNames = {
    "alloc",         "free_requested", "free_completed",
    "segment_alloc", "segment_free",   "segment_map",
    "segment_unmap", "snapshot",       "oom"};
}  // namespace

std::string_view to_string(TraceAction action) {
  return kActionNames[static_cast<std::size_t>(action)];
}

std::optional<TraceAction> trace_action_from_string(std::string_view name) {
  for (std::size_t i = 0; i < kActionNames.size(); ++i) {
    if (kActionNames[i] == name)
      return static_cast<TraceAction>(i);
  }
  return std::nullopt;
}

}  // namespace fragscope
