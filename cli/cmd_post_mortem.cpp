// fragscope-cli post-mortem: a stored run's OOMs diagnosed and the what-if table, the numbers the
// GUI's Post-mortem page shows (both are usecases::post_mortem_of); --apply stores a row's replay
// as a simulated run, as the page's "Run this mitigation" does.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/analysis/advisor.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"
#include "usecases/post_mortem.h"

namespace fragscope::cli {
namespace {

int run_post_mortem(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--run", "--json", "--apply"});
  args.expect_positional(0, "no positional arguments");
  const auto run = args.uint_option("--run");
  if (!run || *run == 0)
    throw UsageError{"--run ID is required"};
  const storage::RunId id{static_cast<std::int64_t>(*run)};
  const std::string path = args.option_or("--db", storage::default_database_path());
  const auto apply = args.option("--apply");
  auto store = storage::open_run_store(
      path, apply ? storage::OpenMode::read_write : storage::OpenMode::read_only, true);
  if (apply) {
    const storage::RunId created = usecases::run_mitigation(*store, id, *apply);
    std::cout << "stored the replay under \"" << *apply << "\" as run " << created.value << "\n";
    return 0;
  }
  const usecases::StoredPostMortem post_mortem = usecases::post_mortem_of(*store, id);
  const analysis::Advice advice = usecases::advice_of(post_mortem);
  if (auto target = args.option("--json")) {
    nlohmann::json result = analysis::to_json(advice);
    if (!post_mortem.what_if_error.empty())
      result["what_if_error"] = post_mortem.what_if_error;
    if (!post_mortem.metrics_error.empty())
      result["metrics_error"] = post_mortem.metrics_error;
    write_json(result, *target);
    return 0;
  }
  std::cout << analysis::to_text(advice);
  if (!post_mortem.what_if_error.empty())
    std::cout << "what-if: " << post_mortem.what_if_error << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"post-mortem",
                       "post-mortem --db FILE --run ID [--json FILE|-] [--apply MITIGATION]",
                       "A stored run's OOMs diagnosed and the what-if table (the GUI's Post-mortem "
                       "page); --apply stores a mitigation's replay as a simulated run",
                       run_post_mortem});

}  // namespace fragscope::cli
