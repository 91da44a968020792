// RunStore: one connection with the catalog, the writer and the reader on it.
#include "storage/db/run_store.h"

#include <filesystem>

#include "storage/db/schema.h"

namespace fragscope::storage {

RunStore::RunStore(const std::string& path, OpenMode mode)
    : Connection{open_store_database(path, mode)},
      RunCatalog(*db),
      RunReader(*db),
      RunWriter(*db) {}

RunStore::~RunStore() = default;

std::unique_ptr<RunStore> open_run_store(const std::string& path, OpenMode mode, bool must_exist) {
  if (must_exist && path != ":memory:" && !std::filesystem::exists(path))
    throw DatabaseError(path + ": no such database");
  return std::make_unique<RunStore>(path, mode);
}

}  // namespace fragscope::storage
