#include "engine/cuda/call_stats.h"

#include <nlohmann/json.hpp>

namespace fragscope::cuda {

nlohmann::json to_json(const CallStats& stats) {
  return {{"count", stats.count},
          {"failures", stats.failures},
          {"total_ms", stats.total_ms()},
          {"mean_us", stats.mean_us()},
          {"max_us", static_cast<double>(stats.max_ns) / 1e3}};
}

}  // namespace fragscope::cuda
