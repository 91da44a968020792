// fragscope-cli export-snapshot: writes a stored run as a PyTorch memory snapshot, so that
// pytorch.org/memory_viz and torch.cuda._memory_viz open runs FragScope imported or simulated.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/snapshot/pickle_writer.h"
#include "storage/db/data_location.h"
#include "storage/db/snapshot_export.h"

namespace fragscope::cli {
namespace {

int run_export_snapshot(const std::vector<std::string>& argv) {
  // Args knows long options only; -o is the conventional spelling of --output.
  std::vector<std::string> spelled = argv;
  for (auto& arg : spelled) {
    if (arg == "-o")
      arg = "--output";
    else if (arg.rfind("-o=", 0) == 0)
      arg = "--output" + arg.substr(2);
  }
  const Args args(spelled, {}, {"--db", "--run", "--output", "--json"});
  args.expect_positional(0, "no positional arguments");
  const auto run = args.uint_option("--run");
  if (!run)
    throw UsageError{"--run ID is required"};
  const auto output = args.option("--output");
  if (!output)
    throw UsageError{"-o OUT.pickle is required"};
  const std::string path = args.option_or("--db", storage::default_database_path());
  auto store = storage::open_run_store(path, storage::OpenMode::read_write, true);
  const storage::RunId id{static_cast<std::int64_t>(*run)};
  const snapshot::Snapshot snapshot = storage::export_snapshot(*store, id);
  snapshot::write_snapshot(snapshot, *output);

  for (const auto& warning : snapshot.warnings)
    std::cerr << "fragscope-cli export-snapshot: warning: " << warning << "\n";
  const std::size_t events = snapshot.device_traces.empty() ? 0 : snapshot.device_traces[0].size();
  if (auto target = args.option("--json")) {
    write_json({{"run_id", id.value},
                {"file", *output},
                {"events", events},
                {"segments", snapshot.segments.size()},
                {"warnings", snapshot.warnings}},
               *target);
    return 0;
  }
  std::cout << "exported run " << id.value << " to " << *output << ": " << events << " events, "
            << snapshot.segments.size() << " segments\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"export-snapshot",
                       "export-snapshot --run ID -o OUT.pickle[.gz] [--db FILE] [--json FILE|-]",
                       "Write a stored run as a PyTorch memory snapshot (for memory_viz)",
                       run_export_snapshot});

}  // namespace fragscope::cli
