// fragscope-cli summary: PyTorch's memory_summary() of a stored run at any event, from a replay of
// the run's events up to that point.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/allocator/summary.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"
#include "storage/db/stats_at.h"
#include "storage/db/stats_keyframes.h"

namespace fragscope::cli {
namespace {

int run_summary(const std::vector<std::string>& argv) {
  const Args args(argv, {"--abbreviated"}, {"--db", "--run", "--at", "--device"});
  args.expect_positional(0, "no positional arguments");
  const auto run = args.uint_option("--run");
  if (!run)
    throw UsageError{"--run ID is required"};
  const std::string path = args.option_or("--db", storage::default_database_path());
  auto store = storage::open_run_store(path, storage::OpenMode::read_only, true);
  const storage::RunId id{static_cast<std::int64_t>(*run)};
  const std::uint64_t count = store->run(id).event_count;
  const std::uint64_t at = args.uint_option("--at").value_or(count);
  if (at > count)
    throw UsageError{"--at " + std::to_string(at) + " is past the run's " + std::to_string(count) +
                     " events"};
  const auto device = args.uint_option("--device").value_or(0);
  if (device > 1024)
    throw UsageError{"--device must be a CUDA device index"};

  // A run stored before allocator-state keyframes were kept gets them once, here (one replay of
  // the run); a read-only database replays from event 0 as before.
  if (storage::stats_keyframes_missing(store->run(id)) &&
      storage::backfill_stats_keyframes(path, id))
    std::cerr << "note: stored allocator-state keyframes for run " << id.value
              << " (once: later summaries replay at most " << storage::kStatsKeyframeInterval
              << " events)\n";
  const storage::MemoryStatsAt state = storage::memory_stats_at(*store, id, at);
  std::cout << alloc::memory_summary(state.stats, static_cast<int>(device),
                                     args.flag("--abbreviated"));
  std::cerr << "note: replayed under " << state.profile.describe() << "\n";
  for (const auto& caveat : state.caveats)
    std::cerr << "note: " << caveat << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"summary",
                       "summary --run ID [--db FILE] [--at EVENT] [--abbreviated] [--device N]",
                       "PyTorch's memory_summary() of the allocator state after the first EVENT "
                       "events (default: all), replayed through the model",
                       run_summary});

}  // namespace fragscope::cli
