#pragma once
// RunStore: one connection to a FragScope database (schema.h) with its three concerns on it:
//   RunCatalog (run_catalog.h)  experiments, runs, comparisons, reports, vacuum
//   RunWriter  (run_writer.h)   storing a run, one transaction per run
//   RunReader  (run_reader.h)   a run's events, series, stacks, timelines, segment state
// The GUI browses it, the CLI and the experiment runner write it. Code that needs one concern
// takes that type (a RunStore is each of them); RunStore itself only opens the file.
//
// A RunStore is one connection: use it from one thread at a time; give each thread its own.
// Readers in other RunStores on the same file keep working while a run is written (WAL).
#include <memory>
#include <string>

#include "storage/db/database.h"
#include "storage/db/run_catalog.h"
#include "storage/db/run_reader.h"
#include "storage/db/run_writer.h"

namespace fragscope::storage {

namespace run_store_detail {
// The connection, a base of RunStore ahead of the concerns so it is opened before them and
// closed after them.
struct Connection {
  std::unique_ptr<Database> db;
};
}  // namespace run_store_detail

class RunStore : private run_store_detail::Connection,
                 public RunCatalog,
                 public RunReader,
                 public RunWriter {
 public:
  // Opens (creating and migrating as needed) the database at `path`; ":memory:" for tests.
  explicit RunStore(const std::string& path, OpenMode mode = OpenMode::read_write_create);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  Database& database() { return *db; }
};

// Opens the store at `path` for a command: with `must_exist`, a missing file is a DatabaseError
// "no such database" instead of a new, empty database.
std::unique_ptr<RunStore> open_run_store(const std::string& path, OpenMode mode, bool must_exist);

}  // namespace fragscope::storage
