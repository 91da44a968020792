#pragma once
// The database schema, versioned with PRAGMA user_version and brought forward by migrations that
// run in order, each in its own transaction. A database written by a newer FragScope is refused
// before anything is written to it.
#include <memory>
#include <string>

#include "storage/db/database.h"

namespace fragscope::storage {

// Marks the file as FragScope's (PRAGMA application_id, "FRSG").
inline constexpr int kApplicationId = 0x46525347;

// The page size open_store_database gives a file it creates (PRAGMA page_size).
inline constexpr int kNewFilePageSize = 16384;

// Thrown for a database whose schema is newer than this build understands. Nothing was written.
class SchemaTooNewError : public DatabaseError {
 public:
  using DatabaseError::DatabaseError;
};

// The number of migrations; user_version after a full migration.
int latest_schema_version();

// PRAGMA user_version of `db` (0 for a new, empty file).
int schema_version(Database& db);

// Applies the migrations from schema_version(db) up to `target` (one transaction each). Tests use
// this to build every earlier version; production code calls open_store_database().
void migrate_to(Database& db, int target);

// Opens `path` for the store: refuses newer schemas and foreign SQLite files, switches a writable
// database to WAL with foreign keys on (a new file with kNewFilePageSize pages first), and
// migrates it to latest_schema_version(). A read-only
// database must already be at the latest version.
std::unique_ptr<Database> open_store_database(const std::string& path,
                                              OpenMode mode = OpenMode::read_write_create);

}  // namespace fragscope::storage
