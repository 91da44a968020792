#pragma once
// Whether an experiment holds every run it was started for. Every front-end that stores an
// experiment (`run`, `gpu-run`, `torch-run`, the designer, the case study) marks it incomplete
// with the number of runs it will store before storing the first, and complete after the last;
// a kill, a full disk, a failed point or a cancel in between leaves it visibly incomplete.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "storage/db/run_store.h"

namespace fragscope::storage {

struct ExperimentProgress {
  bool complete = true;
  // Runs the experiment stores when complete (one per point for `run`; a point of `gpu-run` or
  // `torch-run` stores several). 0 = not recorded (experiments before schema version 4).
  std::uint64_t expected_points = 0;
  std::uint64_t stored_points = 0;  // runs of the experiment now in the database
};

// Creates the experiment, marked incomplete until finish_experiment(), in one transaction.
ExperimentId begin_experiment(RunStore& store, const std::string& name,
                              const nlohmann::json& definition, std::uint64_t expected_points);
// Marks it complete: every point was stored.
void finish_experiment(RunStore& store, ExperimentId experiment);
// Every experiment's progress.
std::map<ExperimentId, ExperimentProgress> experiment_progress(RunStore& store);
// "complete", or "incomplete (2 of 5 runs)".
std::string describe(const ExperimentProgress& progress);

}  // namespace fragscope::storage
