// What the calibration tests share: finding an experiment's point by name, reading a recording's
// NAME.stats.json, and checking a simulated point's peaks against the real memory_stats() with
// the tolerances the workload engine promises (1 % allocated, 2 % reserved unless a test says
// otherwise), printing the errors so the test log gives the figures.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"

namespace fragscope::workload::test {

// The point called `name` in the first of `experiments` that has one.
inline const ExperimentPoint& point_named(std::initializer_list<const Experiment*> experiments,
                                          const std::string& name) {
  for (const Experiment* experiment : experiments)
    for (const ExperimentPoint& p : experiment->points)
      if (p.name == name)
        return p;
  throw std::runtime_error("no experiment point named " + name);
}

inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

struct PeakTolerance {
  double allocated = 0.01;
  double reserved = 0.02;
};

// Expects the simulated peaks within `tolerance` of the recording's memory_stats() and records
// the relative errors as test properties.
inline void expect_peaks_match(const std::string& name, const PointResult& predicted,
                               const nlohmann::json& stats, PeakTolerance tolerance = {}) {
  const auto real_allocated = stats["memory_stats"]["allocated_bytes.all.peak"].get<double>();
  const auto real_reserved = stats["memory_stats"]["reserved_bytes.all.peak"].get<double>();
  const double allocated_error = static_cast<double>(predicted.peak_allocated) / real_allocated - 1;
  const double reserved_error = static_cast<double>(predicted.peak_reserved) / real_reserved - 1;
  EXPECT_LT(std::abs(allocated_error), tolerance.allocated)
      << name << ": predicted " << predicted.peak_allocated << " real " << real_allocated;
  EXPECT_LT(std::abs(reserved_error), tolerance.reserved)
      << name << ": predicted " << predicted.peak_reserved << " real " << real_reserved;
  testing::Test::RecordProperty("peak_allocated_error", std::to_string(allocated_error));
  testing::Test::RecordProperty("peak_reserved_error", std::to_string(reserved_error));
  std::printf(
      "%s: peak allocated model %llu real %.0f (%+.4f %%), peak reserved model %llu real "
      "%.0f (%+.4f %%)\n",
      name.c_str(), static_cast<unsigned long long>(predicted.peak_allocated), real_allocated,
      allocated_error * 100, static_cast<unsigned long long>(predicted.peak_reserved),
      real_reserved, reserved_error * 100);
}

// Whether the recorded run ended in its own OOM ("oom: CUDA out of memory..."); a DDP rank whose
// peer ran out says "failed: ..." instead.
inline bool recorded_oom(const nlohmann::json& stats) {
  return stats["outcome"].get<std::string>().rfind("oom", 0) == 0;
}

}  // namespace fragscope::workload::test
