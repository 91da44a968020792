// fragscope-cli delete: removes one run and everything stored for it.
#include <iostream>

#include "cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"

namespace fragscope::cli {
namespace {

int run_delete(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--run"});
  args.expect_positional(0, "no positional arguments");
  const auto run = args.uint_option("--run");
  if (!run)
    throw UsageError{"--run ID is required"};
  const std::string path = args.option_or("--db", storage::default_database_path());
  auto store = storage::open_run_store(path, storage::OpenMode::read_write, true);
  const storage::RunId id{static_cast<std::int64_t>(*run)};
  const std::string name = store->run(id).name;
  store->delete_run(id);
  std::cout << "deleted run " << id.value << " (" << name << ") from " << path << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"delete", "delete --run ID [--db FILE]",
                       "Delete a run with its events, timeline, keyframes and reports",
                       run_delete});

}  // namespace fragscope::cli
