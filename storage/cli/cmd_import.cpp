// fragscope-cli import: stores a PyTorch memory snapshot as a run.
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"
#include "storage/cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::cli {
namespace {

int run_import(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--name", "--json", "--device", "--stats", "--env"});
  args.expect_positional(1, "one SNAPSHOT file");
  const std::filesystem::path file = args.positional()[0];
  // Read the whole snapshot before touching the database, so a bad file writes nothing.
  const snapshot::Snapshot snapshot = snapshot::read_snapshot(file);
  // The recording's own memory_stats() and cap: --stats FILE, else NAME.stats.json beside it.
  std::optional<nlohmann::json> recorded_stats;
  std::string stats_file;
  if (const auto explicit_stats = args.option("--stats")) {
    stats_file = *explicit_stats;
    recorded_stats = storage::read_recording_stats(stats_file);
  } else if ((recorded_stats = storage::read_companion_stats(file.string()))) {
    stats_file = storage::companion_stats_path(file.string());
  }

  // The environment fingerprint fragscope-record wrote: --env FILE, else NAME.env.json.
  std::optional<nlohmann::json> fingerprint;
  std::string env_file;
  if (const auto explicit_env = args.option("--env")) {
    env_file = *explicit_env;
    fingerprint = storage::read_recording_environment(env_file);
  } else if ((fingerprint = storage::read_companion_environment(file.string()))) {
    env_file = storage::companion_environment_path(file.string());
  }

  storage::ImportOptions options;
  options.source_file = file.string();
  options.recorded_environment = fingerprint;
  options.recorded_environment_file = env_file;
  options.name = args.option_or("--name", storage::run_name_for(file.string()));
  options.recorded_stats = recorded_stats;
  if (const auto device = args.uint_option("--device"))
    options.device = static_cast<std::size_t>(*device);

  const std::string path = args.option_or("--db", storage::default_database_path());
  storage::RunStore store(path);
  const storage::ImportResult result = storage::import_snapshot(store, snapshot, options);
  const nlohmann::json out = {
      {"run_id", result.run.value},
      {"events", result.events},
      {"segments", result.segments},
      {"truncated", result.truncated},
      {"ooms", result.ooms},
      {"recorded_stats", stats_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(stats_file)},
      {"recorded_environment",
       env_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(env_file)}};
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  std::cout << "imported " << file.string() << " as run " << result.run.value << " ("
            << options.name << "): " << result.events << " events, " << result.segments
            << " segments, " << result.ooms << " OOM(s)"
            << (result.truncated ? ", trace truncated" : "")
            << (stats_file.empty() ? "" : ", with the recording's stats from " + stats_file)
            << (env_file.empty() ? "" : ", environment from " + env_file) << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND(
    {"import",
     "import SNAPSHOT [--db FILE] [--name NAME] [--device N] [--stats FILE] [--env FILE] "
     "[--json FILE|-]",
     "Store a PyTorch memory snapshot (.pickle or .pickle.gz) as a run, with the recording's "
     "NAME.stats.json (memory_stats, cap) and NAME.env.json (environment fingerprint) when they "
     "are beside it or given",
     run_import});

}  // namespace fragscope::cli
