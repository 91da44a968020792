#pragma once
// Talking to Slurm: submitting a batch script and asking for an array task's state, through the
// ordinary commands (sbatch, squeue, scontrol, sacct), so whatever a user's shell reaches works.
#include <filesystem>
#include <string>
#include <vector>

namespace fragscope::storage {

struct ProcessOutput {
  int status = -1;  // exit status; 127 when the program could not be started
  std::string out;  // stdout and stderr together
};
// Runs `argv` (no shell) and captures its output.
ProcessOutput run_captured(const std::vector<std::string>& argv);

// sbatch --parsable SCRIPT: the job id. An InputError with sbatch's message when it refuses or
// is not installed.
std::string submit_batch_script(const std::filesystem::path& script);

// The state of array task JOB_TASK: squeue while it is queued or running, then scontrol (recent
// jobs), then sacct (accounting); "" when none of them knows it.
std::string slurm_task_state(const std::string& job_id, int task);

}  // namespace fragscope::storage
