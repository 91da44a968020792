#pragma once
// How long calls took: count, total, longest. One CallStats per kind of call (cudaMalloc,
// cuMemMap, ...); a CallTimer measures one call with the host's steady clock, which is the right
// clock for these calls because each of them blocks the calling thread until it is done.
#include <algorithm>
#include <chrono>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace fragscope::cuda {

struct CallStats {
  std::uint64_t count = 0;
  std::uint64_t failures = 0;  // calls that reported out of memory
  std::int64_t total_ns = 0;
  std::int64_t max_ns = 0;

  void add(std::int64_t ns) {
    ++count;
    total_ns += ns;
    max_ns = std::max(max_ns, ns);
  }
  double total_ms() const { return static_cast<double>(total_ns) / 1e6; }
  double mean_us() const {
    return count ? static_cast<double>(total_ns) / 1e3 / static_cast<double>(count) : 0.0;
  }
  CallStats& operator+=(const CallStats& other) {
    count += other.count;
    failures += other.failures;
    total_ns += other.total_ns;
    max_ns = std::max(max_ns, other.max_ns);
    return *this;
  }
};

// {"count", "failures", "total_ms", "mean_us", "max_us"}
nlohmann::json to_json(const CallStats& stats);

class CallTimer {
 public:
  CallTimer() : start_(std::chrono::steady_clock::now()) {}
  std::int64_t elapsed_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fragscope::cuda
