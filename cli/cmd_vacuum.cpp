// fragscope-cli vacuum: rebuilds the database file to its smallest size.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"

namespace fragscope::cli {
namespace {

int run_vacuum(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db"});
  args.expect_positional(0, "no positional arguments");
  const std::string path = args.option_or("--db", storage::default_database_path());
  auto store = storage::open_run_store(path, storage::OpenMode::read_write, true);
  const auto before = std::filesystem::file_size(path);
  store->vacuum();
  const auto after = std::filesystem::file_size(path);
  std::cout << "vacuumed " << path << ": " << before << " -> " << after << " bytes\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"vacuum", "vacuum [--db FILE]",
                       "Compact the database file (after deleting runs)", run_vacuum});

}  // namespace fragscope::cli
