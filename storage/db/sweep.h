#pragma once
// Experiment sweeps on a Slurm cluster. A sweep is a directory on a file system the cluster
// shares:
//   DIR/sweep.json              what was submitted (format fragscope-sweep/1, kind, points)
//   DIR/experiment.json         the experiment as given (the tasks read this copy)
//   DIR/fragscope-sweep.sbatch  the batch script: one job-array task per point; readable,
//                               editable, resubmittable with plain `sbatch`
//   DIR/slurm_job_id            the array's job id, once submitted
//   DIR/logs/task-N.out         each task's output
//   DIR/tasks/N/                each task's own database (task.db), its result.json (written
//                               last: a task is finished when it exists), exit_status, and for
//                               PyTorch points the recording
// collect_sweep() copies every finished task's runs into the user's database exactly once, and
// reports the tasks still queued or running and those that failed.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/db/experiment_status.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

inline constexpr const char* kSweepScriptName = "fragscope-sweep.sbatch";

enum class SweepKind : std::uint8_t { simulated, torch };

struct SlurmOptions {
  std::string partition;  // empty: the cluster's default
  std::string account;
  std::string time;       // --time, e.g. "00:30:00"
  int gpus_per_task = 1;  // PyTorch points only
  int cpus_per_task = 1;
};

struct SweepSpec {
  SweepKind kind = SweepKind::simulated;
  std::string name;                 // the experiment's name
  std::filesystem::path dir;        // made absolute by write_sweep
  std::vector<std::string> points;  // point names, in task order
  std::filesystem::path cli;        // the fragscope-cli the tasks run
  std::string python = "python3";   // PyTorch points
  std::filesystem::path runner;     // PyTorch points: torch_runner.py
  bool stacks = false;              // PyTorch points: record Python stacks
  SlurmOptions slurm;
};

// A folder Slurm can write task logs into: no blanks, quotes or '%' (an InputError naming it).
void check_sweep_dir(const std::filesystem::path& dir);
// The batch script for `spec` (its dir must be absolute).
std::string batch_script(const SweepSpec& spec);

// Creates DIR (which must not hold another sweep), writes experiment.json, sweep.json, the
// batch script, logs/ and tasks/. Returns the script's path.
std::filesystem::path write_sweep(SweepSpec& spec, const nlohmann::json& experiment_definition);

// sweep.json of DIR; an InputError naming the file when DIR is not a sweep.
nlohmann::json read_sweep(const std::filesystem::path& dir);

enum class TaskState : std::uint8_t {
  collected,          // imported now
  already_collected,  // imported by an earlier collect
  waiting,            // queued or running
  failed,
};
std::string_view to_string(TaskState state);

struct TaskReport {
  int task = 0;
  std::string point;
  TaskState state = TaskState::waiting;
  std::string slurm_state;         // as Slurm reports it ("RUNNING", "FAILED", ...), if known
  std::optional<int> exit_status;  // what the task wrote when its command ended
  std::vector<RunId> runs;         // collected / already collected
  std::string log_tail;            // failed tasks: the end of logs/task-N.out
};

struct CollectReport {
  std::string sweep;  // the experiment's name
  std::filesystem::path dir;
  std::optional<ExperimentId> experiment;
  // The experiment stays incomplete (with its count of runs) until every task is collected.
  ExperimentProgress progress;
  std::vector<TaskReport> tasks;
  std::size_t count(TaskState state) const;
};

// Asks the scheduler for one array task's state ("" when it does not know it).
using SlurmStateQuery = std::function<std::string(const std::string& job_id, int task)>;

// Imports every finished task of the sweep in DIR that is not imported yet (each in one
// transaction, recorded in sweep_tasks so a second collect imports nothing twice). Safe while
// tasks are still running: a task counts as finished only once its result.json exists.
CollectReport collect_sweep(RunStore& store, const std::filesystem::path& dir,
                            const SlurmStateQuery& slurm_state, std::size_t log_lines = 20);

nlohmann::json to_json(const CollectReport& report);

// Copies every run of the database at `source_path` (migrated first) into `store` inside the
// caller's transaction-free context: the runs, their events, strings, stacks, labels, timeline,
// keyframes and OOM reports; twin links are kept between the copied runs. Runs go to
// `experiment`. Returns the new ids in the source's id order. `after_copy` runs inside the same
// transaction (e.g. to record where the runs came from).
std::vector<RunId> copy_runs(RunStore& store, const std::filesystem::path& source_path,
                             std::optional<ExperimentId> experiment,
                             const std::function<void(const std::vector<RunId>&)>& after_copy);

}  // namespace fragscope::storage
