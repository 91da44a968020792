// fragscope-cli env: the environment a run was recorded in (fragscope-record's NAME.env.json,
// stored with the run at import), the differences between two, and an environment.yml that
// recreates one.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::cli {
namespace {

struct LoadedEnvironment {
  std::string label;  // "#3 train" or the file's path
  std::string name;   // the run's name or the file's stem
  nlohmann::json json;
  analysis::RecordedEnvironment env;
};

bool is_run_id(const std::string& text) {
  return !text.empty() && text.size() < 19 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// RUN is a stored run's id, or the path of an env.json file (no import needed).
LoadedEnvironment load(const std::string& which, const std::string& db_path) {
  LoadedEnvironment loaded;
  if (is_run_id(which)) {
    auto store = storage::open_run_store(db_path, storage::OpenMode::read_only, true);
    const storage::RunId id{std::stoll(which)};
    const storage::RunRecord record = store->run(id);
    auto json = store->recorded_environment(id);
    if (!json)
      throw InputError("run " + which + " (" + record.name +
                       ") has no recorded environment: it was imported without a NAME.env.json "
                       "(record with `python -m fragscope_record`, or import with --env FILE)");
    loaded.label = "#" + which + " " + record.name;
    loaded.name = record.name;
    loaded.json = std::move(*json);
    loaded.env = analysis::parse_recorded_environment(loaded.json, db_path + ": run " + which);
    return loaded;
  }
  if (!std::filesystem::exists(which))
    throw InputError(which + ": neither a run id nor an existing env.json file");
  loaded.label = which;
  std::string stem = std::filesystem::path(which).filename().string();
  if (const auto dot = stem.find(".env.json"); dot != std::string::npos)
    stem = stem.substr(0, dot);
  loaded.name = stem;
  loaded.json = storage::read_recording_environment(which);
  loaded.env = analysis::parse_recorded_environment(loaded.json, which);
  return loaded;
}

std::string environment_name(const std::string& name) {
  std::string out;
  for (char c : name)
    out +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  return out.empty() ? "fragscope-run" : out;
}

void write_text_file(const std::string& text, const std::string& target) {
  if (target == "-") {
    std::cout << text << std::flush;
    return;
  }
  if (std::filesystem::exists(target))
    throw InputError(target + ": exists already; give another --out FILE (or remove it)");
  std::filesystem::path temp = target;
  temp += ".partial";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw InputError(target + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) {
      std::filesystem::remove(temp);
      throw InputError(target + ": write failed");
    }
  }
  std::filesystem::rename(temp, target);
}

int run_env(const std::vector<std::string>& argv) {
  const Args args(argv, {"--diff", "--conda-yml"}, {"--db", "--json", "--out"});
  const std::string db = args.option_or("--db", storage::default_database_path());
  if (args.flag("--diff")) {
    args.expect_positional(2, "two runs (ids or env.json files) after --diff");
    if (args.flag("--conda-yml"))
      throw UsageError{"--conda-yml takes one run, not --diff"};
    const LoadedEnvironment a = load(args.positional()[0], db);
    const LoadedEnvironment b = load(args.positional()[1], db);
    const auto differences = analysis::diff_environments(a.env, b.env);
    if (const auto target = args.option("--json")) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& d : differences)
        list.push_back({{"point", d.point}, {"first", d.first}, {"second", d.second}});
      write_json({{"first", a.label}, {"second", b.label}, {"differences", list}}, *target);
      return 0;
    }
    if (differences.empty()) {
      std::cout << "same environment: " << a.label << " and " << b.label << " ("
                << analysis::describe_torch(a.env) << ")\n";
      return 0;
    }
    std::cout << differences.size() << " difference(s) between " << a.label << " and " << b.label
              << ":\n";
    for (const auto& d : differences)
      std::cout << "  " << d.point << ": " << d.first << " vs " << d.second << "\n";
    return 0;
  }
  args.expect_positional(1, "one run (id or env.json file)");
  const LoadedEnvironment loaded = load(args.positional()[0], db);
  if (args.flag("--conda-yml")) {
    const std::string target = args.option_or("--out", "environment.yml");
    write_text_file(analysis::environment_yml(loaded.env, environment_name(loaded.name)), target);
    if (target != "-")
      std::cout << "wrote " << target << " (conda env create -f " << target << ")\n";
    return 0;
  }
  if (args.option("--out"))
    throw UsageError{"--out goes with --conda-yml"};
  if (const auto target = args.option("--json")) {
    write_json(loaded.json, *target);
    return 0;
  }
  std::cout << loaded.label << "\n" << analysis::to_text(loaded.env);
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND(
    {"env",
     "env RUN [--db FILE] [--json FILE|-] | env --diff RUN_A RUN_B [--db FILE] [--json FILE|-] | "
     "env RUN --conda-yml [--out FILE|-]",
     "The environment a run was recorded in (fragscope-record's NAME.env.json; RUN is a run id "
     "or an env.json file), the differences between two, or an environment.yml recreating it",
     run_env});

}  // namespace fragscope::cli
