// fragscope-cli job: the imbalance table of a multi-rank job (peaks, fragmentation and OOM per
// rank, the worst rank marked), or the list of jobs.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/core/error.h"
#include "storage/db/data_location.h"
#include "storage/db/jobs.h"

namespace fragscope::cli {
namespace {

int run_job(const std::vector<std::string>& argv) {
  const Args args(argv, {"--delete", "--with-runs"}, {"--db", "--job", "--json"});
  args.expect_positional(0, "no positional arguments");
  const std::string path = args.option_or("--db", storage::default_database_path());
  const bool write = args.flag("--delete");
  if (args.flag("--with-runs") && !write)
    throw UsageError{"--with-runs goes with --delete"};
  auto store = storage::open_run_store(
      path, write ? storage::OpenMode::read_write : storage::OpenMode::read_only, true);
  const auto name = args.option("--job");
  if (!name) {
    if (write)
      throw UsageError{"--delete needs --job NAME"};
    nlohmann::json jobs = nlohmann::json::array();
    for (const storage::JobRecord& job : storage::list_jobs(*store)) {
      nlohmann::json runs = nlohmann::json::array();
      for (const storage::JobRank& rank : job.ranks)
        runs.push_back(rank.run.value);
      jobs.push_back({{"job", job.name},
                      {"job_id", job.id.value},
                      {"world_size", job.world_size},
                      {"ranks", job.ranks.size()},
                      {"run_ids", runs},
                      {"origin", job.origin},
                      {"created_at", job.created_at}});
    }
    if (auto target = args.option("--json")) {
      write_json(jobs, *target);
      return 0;
    }
    if (jobs.empty())
      std::cout << "no jobs in " << path << "\n";
    for (const auto& job : jobs) {
      std::cout << job["job"].get<std::string>() << ": " << job["ranks"].get<std::size_t>()
                << " of " << job["world_size"].get<int>() << " ranks, runs "
                << job["run_ids"].dump() << " (" << job["origin"].get<std::string>() << ")\n";
    }
    return 0;
  }
  const auto job = storage::find_job(*store, *name);
  if (!job)
    throw InputError(path + ": no job named \"" + *name + "\" (fragscope-cli job lists them)");
  if (write) {
    storage::delete_job(*store, job->id, args.flag("--with-runs"));
    std::cout << "deleted job " << job->name
              << (args.flag("--with-runs") ? " and its runs" : " (its runs stay)") << "\n";
    return 0;
  }
  const analysis::JobBalance balance = storage::job_balance(*store, *job);
  if (auto target = args.option("--json")) {
    write_json(analysis::to_json(balance), *target);
    return 0;
  }
  std::cout << analysis::to_text(balance);
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"job",
                       "job [--job NAME] [--db FILE] [--json FILE|-] [--delete [--with-runs]]",
                       "A multi-rank job's imbalance table: peak allocated, peak reserved, "
                       "fragmentation and OOM per rank, the worst rank marked; without --job, "
                       "the list of jobs",
                       run_job});

}  // namespace fragscope::cli
