#pragma once
// Whether an experiment holds every point it was started with. `run` marks the experiment
// incomplete with its number of points before storing the first one, and complete after the
// last; a kill, a full disk or a failed point in between leaves it visibly incomplete.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "storage/db/run_store.h"

namespace fragscope::storage {

struct ExperimentProgress {
  bool complete = true;
  std::uint64_t expected_points = 0;  // 0 = not recorded (experiments before schema version 4)
  std::uint64_t stored_points = 0;    // runs of the experiment now in the database
};

// Creates the experiment, marked incomplete until finish_experiment(), in one transaction.
ExperimentId begin_experiment(RunStore& store, const std::string& name,
                              const nlohmann::json& definition, std::uint64_t expected_points);
// Marks it complete: every point was stored.
void finish_experiment(RunStore& store, ExperimentId experiment);
// Every experiment's progress.
std::map<ExperimentId, ExperimentProgress> experiment_progress(RunStore& store);
// "complete", or "incomplete (2 of 5 points)".
std::string describe(const ExperimentProgress& progress);

}  // namespace fragscope::storage
