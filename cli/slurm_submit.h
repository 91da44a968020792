#pragma once
// `run --slurm` and `torch-run --slurm`: the options they share, and writing / printing /
// submitting the sweep (storage/db/sweep.h).
#include <set>
#include <string>

#include "cli/command.h"
#include "storage/db/sweep.h"

namespace fragscope::cli {

// The flags and options --slurm adds to a command's own.
inline const std::set<std::string> kSlurmFlags = {"--slurm", "--dry-run"};
inline const std::set<std::string> kSlurmOptions = {"--partition",     "--account",       "--time",
                                                    "--gpus-per-task", "--cpus-per-task", "--out"};

// Fills spec.slurm and spec.dir (--out, else ./fragscope-sweep-NAME-<time>) and spec.cli; a
// Slurm option without --slurm is a UsageError.
void apply_slurm_options(const Args& args, storage::SweepSpec& spec);
// Slurm options given without --slurm: a UsageError naming them.
void reject_slurm_options(const Args& args);

// --dry-run: prints the batch script, writes nothing. Otherwise writes the sweep folder, submits
// the script with sbatch and prints where everything is (--json: as JSON). Returns the exit code.
int submit_sweep(const Args& args, storage::SweepSpec spec, const nlohmann::json& definition);

}  // namespace fragscope::cli
