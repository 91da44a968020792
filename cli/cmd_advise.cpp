// fragscope-cli advise: which allocator setting (or program change) would have avoided the OOM
// or lowered the reserved peak, for a recorded snapshot or an experiment file.
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/snapshot_options.h"
#include "engine/analysis/advisor.h"
#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"

namespace fragscope::cli {
namespace {

constexpr std::uint64_t kMaxThreads = 256;

bool is_experiment_file(const std::string& path) {
  return std::filesystem::path(path).extension() == ".json";
}

const workload::ExperimentPoint& pick_point(const workload::Experiment& experiment,
                                            const std::optional<std::string>& variant,
                                            const std::string& path) {
  if (experiment.points.empty())
    throw InputError(path + ": the experiment has no points to advise on");
  if (!variant)
    return experiment.points.front();
  std::string names;
  for (const auto& point : experiment.points) {
    if (point.name == *variant)
      return point;
    names += (names.empty() ? "" : ", ") + point.name;
  }
  throw InputError(path + ": no variant \"" + *variant + "\" (the experiment has: " + names + ")");
}

int run_advise(const std::vector<std::string>& argv) {
  const Args args(argv, {},
                  {"--capacity", "--json", "--threads", "--variant", "--device", "--torch-version",
                   "--what-if-releases"});
  args.expect_positional(1, "one SNAPSHOT or EXPERIMENT.json");
  const std::string path = args.positional().front();
  analysis::AdviseOptions options;
  options.capacity = args.uint_option("--capacity");
  if (options.capacity && *options.capacity == 0)
    throw UsageError{"--capacity must be at least 1 byte"};
  const std::uint64_t threads = args.uint_option("--threads").value_or(0);
  if (threads > kMaxThreads)
    throw UsageError{"--threads must be at most " + std::to_string(kMaxThreads)};
  options.threads = static_cast<unsigned>(threads);
  if (auto device = args.uint_option("--device"))
    options.device = static_cast<std::size_t>(*device);
  const auto releases_for = [&](TorchVersion current) {
    if (const auto releases = args.option("--what-if-releases")) {
      try {
        options.what_if_releases = analysis::parse_release_list(*releases, current);
      } catch (const InputError& error) {
        throw UsageError{error.what()};
      }
    }
  };

  analysis::Advice advice;
  if (is_experiment_file(path)) {
    if (options.device)
      throw UsageError{"--device applies to snapshots, not experiment files"};
    if (args.option("--torch-version"))
      throw UsageError{"--torch-version applies to snapshots, not experiment files"};
    releases_for(kLatestTorch);
    const workload::Experiment experiment = workload::load_experiment(path);
    advice = analysis::advise_experiment(pick_point(experiment, args.option("--variant"), path),
                                         path, options);
  } else {
    if (args.option("--variant"))
      throw UsageError{"--variant applies to experiment files, not snapshots"};
    // Spooled, as replay reads it: the trace packed (~10 bytes an entry, past 4 MB in a
    // temporary file), no per-entry texts.
    snapshot::Snapshot snap = snapshot::read_snapshot_spooled(path);
    // The what-if runs in flight hold a fifth of the file's size at most together (each a table
    // of the trace's tensors, 16 bytes a tensor): beside the spool and the packed requests that
    // keeps advise below half the file's size whatever the thread count.
    std::error_code no_size;
    const std::uintmax_t file_bytes = std::filesystem::file_size(path, no_size);
    if (!no_size)
      options.memory_budget = analysis::what_if_memory_budget(file_bytes);
    apply_torch_version_option(args, snap);
    releases_for(snap.torch_version.profile());
    advice = analysis::advise_snapshot(snap, path, options);
  }
  if (auto target = args.option("--json")) {
    // The release the rows followed (the JSON has it too, under allocator_rules).
    std::cerr << "note: allocator rules: " << advice.profile.describe() << "\n";
    write_json(analysis::to_json(advice), *target);
    return 0;
  }
  std::cout << analysis::to_text(advice);
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"advise",
                       "advise SNAPSHOT|EXPERIMENT.json [--capacity BYTES] [--threads N] "
                       "[--variant NAME] [--device N] [--torch-version X.Y] "
                       "[--what-if-releases X.Y,...|newer|all] [--json FILE|-]",
                       "OOM post-mortem and a what-if table: which allocator setting gives the "
                       "lowest peak reserved without an OOM",
                       run_advise});

}  // namespace fragscope::cli
