// fragscope-cli vacuum: rebuilds the database file to its smallest size.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/run_store.h"
#include "storage/db/schema.h"

namespace fragscope::cli {
namespace {

int run_vacuum(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db"});
  args.expect_positional(0, "no positional arguments");
  const std::string path = args.option_or("--db", storage::default_database_path());
  auto store = storage::open_run_store(path, storage::OpenMode::read_write, true);
  const auto page_size = [&] { return store->database().query_int("PRAGMA page_size"); };
  const auto before = std::filesystem::file_size(path);
  const auto pages_before = page_size();
  store->vacuum();
  const auto after = std::filesystem::file_size(path);
  const auto pages_after = page_size();
  std::cout << "vacuumed " << path << ": " << before << " -> " << after << " bytes";
  if (pages_after != pages_before)
    std::cout << "; pages " << pages_before << " -> " << pages_after << " bytes";
  else if (pages_after != storage::kNewFilePageSize)
    std::cout << "; pages stay " << pages_after << " bytes (another program has the file open: "
              << "vacuum again once it is closed for " << storage::kNewFilePageSize
              << "-byte pages, which imports write faster)";
  std::cout << "\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"vacuum", "vacuum [--db FILE]",
                       "Compact the database file (after deleting runs)", run_vacuum});

}  // namespace fragscope::cli
