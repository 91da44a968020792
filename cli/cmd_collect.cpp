// fragscope-cli collect: imports the finished tasks of a Slurm sweep folder into the database,
// each once, and reports the tasks still queued or running and those that failed (their Slurm
// state and the end of their log).
#include <algorithm>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/slurm.h"
#include "storage/db/sweep.h"

namespace fragscope::cli {
namespace {

int run_collect(const std::vector<std::string>& argv) {
  const Args args(argv, {"--no-slurm"}, {"--db", "--json", "--log-lines"});
  args.expect_positional(1, "one sweep folder (the --out of run/torch-run --slurm)");
  const std::size_t log_lines = static_cast<std::size_t>(
      std::min<std::uint64_t>(args.uint_option("--log-lines").value_or(20), 10000));
  storage::read_sweep(args.positional()[0]);  // not a sweep: fail before creating a database
  storage::RunStore store(args.option_or("--db", storage::default_database_path()));
  storage::SlurmStateQuery query;
  if (!args.flag("--no-slurm"))
    query = storage::slurm_task_state;
  const storage::CollectReport report =
      storage::collect_sweep(store, args.positional()[0], query, log_lines);
  const int exit_code = report.count(storage::TaskState::failed) ? 3 : 0;
  if (auto target = args.option("--json")) {
    write_json(storage::to_json(report), *target);
    return exit_code;
  }
  std::cout << report.sweep << " (" << report.dir.string()
            << "): " << report.count(storage::TaskState::collected) << " collected now, "
            << report.count(storage::TaskState::already_collected) << " collected before, "
            << report.count(storage::TaskState::waiting) << " queued or running, "
            << report.count(storage::TaskState::failed) << " failed\n";
  if (report.experiment) {
    std::cout << "  experiment " << report.experiment->value << ": "
              << storage::describe(report.progress) << "\n";
  }
  for (const storage::TaskReport& task : report.tasks) {
    std::cout << "  task " << task.task << " (" << task.point << "): " << to_string(task.state);
    if (!task.runs.empty()) {
      std::cout << ", run(s)";
      for (const storage::RunId run : task.runs)
        std::cout << " " << run.value;
    }
    if (!task.slurm_state.empty())
      std::cout << ", Slurm: " << task.slurm_state;
    if (task.exit_status && *task.exit_status != 0)
      std::cout << ", exit status " << *task.exit_status;
    std::cout << "\n";
    if (task.state == storage::TaskState::failed && !task.log_tail.empty()) {
      std::cout << "    --- end of logs/task-" << task.task << ".out ---\n";
      std::istringstream lines(task.log_tail);
      for (std::string line; std::getline(lines, line);)
        std::cout << "    " << line << "\n";
    }
  }
  return exit_code;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"collect",
                       "collect SWEEP_DIR [--db FILE] [--json FILE|-] [--log-lines N] "
                       "[--no-slurm]",
                       "Import the finished tasks of a Slurm sweep (run/torch-run --slurm) into "
                       "the database, each once; safe while tasks still run; reports failed "
                       "tasks with their Slurm state and log tail (exit 3 when any failed)",
                       run_collect});

}  // namespace fragscope::cli
