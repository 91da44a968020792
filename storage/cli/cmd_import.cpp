// fragscope-cli import: stores a PyTorch memory snapshot as a run.
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"
#include "storage/cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::cli {
namespace {

int run_import(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--name", "--json", "--device"});
  args.expect_positional(1, "one SNAPSHOT file");
  const std::filesystem::path file = args.positional()[0];
  // Read the whole snapshot before touching the database, so a bad file writes nothing.
  const snapshot::Snapshot snapshot = snapshot::read_snapshot(file);

  storage::ImportOptions options;
  options.source_file = file.string();
  std::string default_name = file.filename().string();
  for (const char* suffix : {".gz", ".pickle"}) {
    if (default_name.size() > std::string(suffix).size() && default_name.ends_with(suffix))
      default_name.resize(default_name.size() - std::string(suffix).size());
  }
  options.name = args.option_or("--name", default_name);
  if (const auto device = args.uint_option("--device"))
    options.device = static_cast<std::size_t>(*device);

  const std::string path = args.option_or("--db", storage::default_database_path());
  storage::RunStore store(path);
  const storage::ImportResult result = storage::import_snapshot(store, snapshot, options);
  const nlohmann::json out = {{"run_id", result.run.value},
                              {"events", result.events},
                              {"segments", result.segments},
                              {"truncated", result.truncated},
                              {"ooms", result.ooms}};
  if (auto target = args.option("--json")) {
    write_json(out, *target);
    return 0;
  }
  std::cout << "imported " << file.string() << " as run " << result.run.value << " ("
            << options.name << "): " << result.events << " events, " << result.segments
            << " segments, " << result.ooms << " OOM(s)"
            << (result.truncated ? ", trace truncated" : "") << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"import",
                       "import SNAPSHOT [--db FILE] [--name NAME] [--device N] [--json FILE|-]",
                       "Store a PyTorch memory snapshot (.pickle or .pickle.gz) as a run",
                       run_import});

}  // namespace fragscope::cli
