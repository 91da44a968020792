// fragscope-cli runs: the runs in the database, as a table, as JSON, or just their number.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/experiment_status.h"
#include "storage/db/run_json.h"
#include "storage/db/run_store.h"

namespace fragscope::cli {
namespace {

std::string gib(std::int64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1 << 30) << " GiB";
  return text.str();
}

int run_runs(const std::vector<std::string>& argv) {
  const Args args(argv, {"--count"}, {"--db", "--json"});
  args.expect_positional(0, "no positional arguments");
  const std::string path = args.option_or("--db", storage::default_database_path());
  // Listing a database that does not exist yet is not an error: it holds no runs. Nothing is
  // created, so `runs --count` is safe to call from scripts before the first run.
  std::vector<storage::RunRecord> runs;
  std::map<storage::ExperimentId, storage::ExperimentProgress> experiments;
  if (std::filesystem::exists(path)) {
    storage::RunStore store(path, storage::OpenMode::read_write);
    runs = store.list_runs();
    experiments = storage::experiment_progress(store);
  }
  // A run of an experiment that was interrupted says so (the other points are missing).
  const auto experiment_status = [&](const storage::RunRecord& run) -> std::string {
    if (!run.experiment)
      return "";
    const auto it = experiments.find(*run.experiment);
    return it == experiments.end() ? "" : storage::describe(it->second);
  };
  if (args.flag("--count")) {
    std::cout << runs.size() << "\n";
    return 0;
  }
  if (auto target = args.option("--json")) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& run : runs) {
      all.push_back(storage::to_json(run));
      if (const std::string status = experiment_status(run); !status.empty())
        all.back()["experiment_status"] = status;
    }
    write_json(all, *target);
    return 0;
  }
  if (runs.empty()) {
    std::cout << "no runs in " << path << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(6) << "ID" << std::setw(28) << "NAME" << std::setw(11)
            << "SOURCE" << std::setw(11) << "STATUS" << std::setw(11) << "EVENTS" << std::setw(14)
            << "PEAK RESERVED"
            << "  CREATED\n";
  for (const auto& run : runs) {
    const auto peak = run.summary.value("/peaks/reserved"_json_pointer, std::int64_t{0});
    std::string name = run.name.size() > 26 ? run.name.substr(0, 25) + "~" : run.name;
    std::cout << std::left << std::setw(6) << run.id.value << std::setw(28) << name << std::setw(11)
              << storage::to_string(run.source) << std::setw(11) << storage::to_string(run.status)
              << std::setw(11) << run.event_count << std::setw(14) << gib(peak) << "  "
              << run.created_at;
    if (const std::string status = experiment_status(run); status.rfind("incomplete", 0) == 0)
      std::cout << "  experiment " << run.experiment->value << " " << status;
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"runs", "runs [--db FILE] [--json FILE|-] [--count]",
                       "List the stored runs (--count prints only their number)", run_runs});

}  // namespace fragscope::cli
