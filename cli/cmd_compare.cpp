// fragscope-cli compare: stored runs side by side — peaks, fragmentation, OOMs, retries,
// segments, device calls, step time — with per-phase differences where the runs align and
// warnings when they were made under different conditions.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/analysis/compare.h"
#include "engine/core/error.h"
#include "storage/db/data_location.h"
#include "storage/db/run_list.h"
#include "storage/db/run_store.h"
#include "usecases/compare.h"

namespace fragscope::cli {
namespace {

constexpr std::uint64_t kMaxPhases = 1000;

std::vector<storage::RunId> parse_run_ids(const std::string& list) {
  std::vector<storage::RunId> ids;
  try {
    ids = storage::parse_run_list(list);
  } catch (const InputError& error) {
    throw UsageError{std::string("--runs: ") + error.what()};
  }
  if (ids.size() < 2)
    throw UsageError{"--runs needs at least two run ids"};
  return ids;
}

int run_compare(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--runs", "--json", "--phases", "--save"});
  args.expect_positional(0, "no positional arguments");
  const auto runs = args.option("--runs");
  if (!runs)
    throw UsageError{"--runs A,B[,C...] is required"};
  const std::vector<storage::RunId> ids = parse_run_ids(*runs);
  const std::uint64_t phases =
      args.uint_option("--phases").value_or(usecases::kDefaultComparePhases);
  if (phases == 0 || phases > kMaxPhases)
    throw UsageError{"--phases must be between 1 and " + std::to_string(kMaxPhases)};
  const std::string path = args.option_or("--db", storage::default_database_path());
  const bool save = args.option("--save").has_value();
  auto store = storage::open_run_store(
      path, save ? storage::OpenMode::read_write : storage::OpenMode::read_only, true);

  const analysis::Comparison comparison =
      usecases::compare_stored_runs(*store, ids, static_cast<std::size_t>(phases)).comparison;
  nlohmann::json result = analysis::to_json(comparison);
  if (save) {
    const storage::ComparisonId saved = store->save_comparison(*args.option("--save"), ids, result);
    result["comparison_id"] = saved.value;
  }
  if (auto target = args.option("--json")) {
    write_json(result, *target);
    return 0;
  }
  std::cout << analysis::to_text(comparison);
  if (save)
    std::cout << "saved as comparison " << result["comparison_id"].get<std::int64_t>() << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"compare",
                       "compare --db FILE --runs A,B[,C...] [--phases N] [--save NAME] "
                       "[--json FILE|-]",
                       "Stored runs side by side: peaks, fragmentation, OOMs, retries, segments, "
                       "device calls, step time; per-phase differences and condition warnings",
                       run_compare});

}  // namespace fragscope::cli
