// fragscope-cli import: stores a PyTorch memory snapshot as a run.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/snapshot_options.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/data_location.h"
#include "storage/db/job_import.h"
#include "storage/db/snapshot_import.h"
#include "usecases/import.h"

namespace fragscope::cli {
namespace {

// Several snapshots, a directory or a job manifest: one run per rank, linked to a job.
int import_job(const Args& args) {
  for (const char* single : {"--name", "--device", "--stats", "--env"}) {
    if (args.option(single))
      throw UsageError{std::string(single) + " applies to one snapshot; a job's ranks take " +
                       "their names from the job and their stats from the manifest or beside " +
                       "each snapshot"};
  }
  const storage::JobSource source = storage::job_source_of(args.positional());
  storage::JobImportOptions options;
  options.job_name = args.option_or("--job", "");
  if (const auto threads = args.uint_option("--threads"))
    options.threads = static_cast<unsigned>(std::min<std::uint64_t>(*threads, 1024));
  const std::string path = args.option_or("--db", storage::default_database_path());
  storage::RunStore store(path);
  const storage::JobImportResult result = storage::import_job(store, source, options);
  const storage::JobRecord job = storage::job(store, result.job);
  nlohmann::json ranks = nlohmann::json::array();
  for (const storage::RankImport& rank : result.ranks) {
    ranks.push_back({{"rank", rank.rank},
                     {"run_id", rank.result.run.value},
                     {"snapshot", rank.snapshot},
                     {"events", rank.result.events},
                     {"segments", rank.result.segments},
                     {"truncated", rank.result.truncated},
                     {"ooms", rank.result.ooms}});
  }
  const nlohmann::json out = {{"job", job.name},
                              {"job_id", job.id.value},
                              {"world_size", job.world_size},
                              {"ranks", ranks}};
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  std::cout << "imported job " << job.name << " (" << result.ranks.size() << " of world size "
            << job.world_size << ") from " << source.origin << "\n";
  for (const storage::RankImport& rank : result.ranks) {
    std::cout << "  rank " << rank.rank << ": run " << rank.result.run.value << ", "
              << rank.result.events << " events, " << rank.result.segments << " segments, "
              << rank.result.ooms << " OOM(s)" << (rank.result.truncated ? ", truncated" : "")
              << "  (" << rank.snapshot << ")\n";
  }
  return 0;
}

int run_import(const std::vector<std::string>& argv) {
  const Args args(argv, {},
                  {"--db", "--name", "--json", "--device", "--stats", "--env", "--job", "--threads",
                   "--torch-version"});
  if (args.positional().empty())
    throw UsageError{"expected a SNAPSHOT file (or, with --job, several, a directory or a " +
                     std::string(storage::kJobManifestName) + ")"};
  std::error_code ignored;
  const std::filesystem::path first = args.positional().front();
  if (args.option("--job") || args.positional().size() > 1 ||
      std::filesystem::is_directory(first, ignored) || first.extension() == ".json")
    return import_job(args);
  if (args.option("--threads"))
    throw UsageError{"--threads applies to a job (several snapshots)"};
  const std::filesystem::path file = args.positional()[0];
  // Read the whole recording before touching the database, so a bad file writes nothing: the
  // stats (--stats FILE, else NAME.stats.json) and environment (--env FILE, else NAME.env.json).
  usecases::Recording recording = usecases::read_recording(
      file.string(), args.option_or("--stats", ""), args.option_or("--env", ""));
  snapshot::Snapshot& snapshot = recording.snapshot;
  apply_torch_version_option(args, snapshot);
  const alloc::RecordedAllocatorConfig config = recorded_config_or_error(file.string(), snapshot);
  const std::string& stats_file = recording.stats_file;
  const std::string& env_file = recording.environment_file;

  storage::ImportOptions options;
  options.name = args.option_or("--name", storage::run_name_for(file.string()));
  if (const auto device = args.uint_option("--device"))
    options.device = static_cast<std::size_t>(*device);

  const std::string path = args.option_or("--db", storage::default_database_path());
  storage::RunStore store(path);
  const storage::ImportResult result = usecases::import_recording(store, recording, options);
  const nlohmann::json out = {
      {"run_id", result.run.value},
      {"events", result.events},
      {"segments", result.segments},
      {"truncated", result.truncated},
      {"device", options.device ? nlohmann::json(*options.device) : nlohmann::json(nullptr)},
      {"torch_version", torch_version_json(snapshot.torch_version)},
      {"allocator_config_note", config.note()},
      {"ooms", result.ooms},
      {"warnings", result.warnings},
      {"recorded_stats", stats_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(stats_file)},
      {"recorded_environment",
       env_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(env_file)}};
  for (const std::string& warning : result.warnings)
    std::cerr << "warning: " << file.string() << ": " << warning << "\n";
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  std::cout << "imported " << file.string() << " as run " << result.run.value << " ("
            << options.name << "): " << result.events << " events, " << result.segments
            << " segments, " << result.ooms << " OOM(s)"
            << (result.truncated ? ", trace truncated" : "")
            << (stats_file.empty() ? "" : ", with the recording's stats from " + stats_file)
            << (env_file.empty() ? "" : ", environment from " + env_file)
            << "\n  written by PyTorch " << snapshot.torch_version.describe() << "\n";
  if (!config.note().empty())
    std::cout << "  allocator settings: " << config.note() << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND(
    {"import",
     "import SNAPSHOT [--db FILE] [--name NAME] [--device N] [--stats FILE] [--env FILE] "
     "[--torch-version X.Y] [--json FILE|-]\n"
     "  import RANK0.pickle RANK1.pickle ... | DIR | fragscope-job.json [--job NAME] "
     "[--threads N] [--db FILE] [--json FILE|-]",
     "Store a PyTorch memory snapshot (.pickle or .pickle.gz) as a run, with the recording's "
     "NAME.stats.json (memory_stats, cap) and NAME.env.json (environment fingerprint) when they "
     "are beside it or given; several snapshots, a directory or a job manifest become one run per "
     "rank linked to a job (read in parallel)",
     run_import});

}  // namespace fragscope::cli
