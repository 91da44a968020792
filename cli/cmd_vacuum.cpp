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
  const auto before = std::filesystem::file_size(path);
  const auto result = store->vacuum();
  const auto after = std::filesystem::file_size(path);
  std::cout << "vacuumed " << path << ": " << before << " -> " << after << " bytes";
  if (result.page_size_after != result.page_size_before)
    std::cout << "; pages " << result.page_size_before << " -> " << result.page_size_after
              << " bytes";
  else if (!result.pages_kept_because.empty())
    std::cout << "; pages stay " << result.page_size_after << " bytes, not "
              << storage::kNewFilePageSize << " (" << result.pages_kept_because << ")";
  std::cout << "\n";
  if (!result.in_wal_mode)
    std::cout << "note: another program opened the file during the vacuum; it stays in "
                 "rollback-journal mode until FragScope next opens it for writing\n";
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"vacuum", "vacuum [--db FILE]",
                       "Compact the database file (after deleting runs)", run_vacuum});

}  // namespace fragscope::cli
