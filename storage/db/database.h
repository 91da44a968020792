#pragma once
// A small RAII wrapper over SQLite (the Zeal Database/Statement shape, SQLiteCpp's Transaction):
// sqlite3.h stays inside database.cpp, so nothing above storage/db ever sees a raw handle. Every
// failure is a DatabaseError naming the file and what went wrong, never an abort.
//
// Thread-safety: one Database (and its Statements) belongs to one thread at a time. Concurrent
// readers and a writer each open their own Database on the same file (WAL mode allows that).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/core/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fragscope::storage {

// Bad file, corrupt file, read-only file, SQL failure: one line naming the database and the cause.
// It is an InputError so the CLI prints it and exits 2.
class DatabaseError : public InputError {
 public:
  using InputError::InputError;
};

// The disk (or the database's page limit) is full; the transaction that hit it was rolled back.
class DatabaseFullError : public DatabaseError {
 public:
  using DatabaseError::DatabaseError;
};

enum class OpenMode : std::uint8_t {
  read_write_create,  // create the file if missing (the default for the GUI and CLI)
  read_write,         // the file must exist
  read_only,          // never writes; readers beside a writer use this
};

class Statement;

class Database {
 public:
  // `path` may be ":memory:" for a private in-memory database (tests).
  explicit Database(const std::string& path, OpenMode mode = OpenMode::read_write_create);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  Database(Database&&) = delete;
  Database& operator=(Database&&) = delete;

  // Runs one or more statements that return no rows (schema scripts, PRAGMAs).
  void exec(std::string_view sql);
  Statement prepare(std::string_view sql);
  // The first column of the first row of `sql` as an integer (e.g. "PRAGMA user_version").
  std::int64_t query_int(std::string_view sql);

  std::int64_t last_insert_rowid() const;
  // Rows changed by the most recent INSERT/UPDATE/DELETE.
  std::int64_t changes() const;
  const std::string& path() const { return path_; }
  // True when opened read-only or when SQLite fell back to read-only (a write-protected file).
  bool read_only() const;
  bool in_transaction() const;

  // Throws the DatabaseError for SQLite result code `rc`, prefixed with the file and `context`.
  // A full disk (SQLITE_FULL, or any error whose OS cause is ENOSPC) is a DatabaseFullError.
  [[noreturn]] void fail(int rc, std::string_view context) const;

  // Statements prepared on this connection and not yet finalized (tests check for leaks).
  std::size_t open_statements() const;
  // True when no other Database in this process has the same file open.
  bool only_connection_in_process() const;

 private:
  friend class Statement;
  sqlite3* db_ = nullptr;
  std::string path_;
  std::string file_key_;  // the canonical path, for only_connection_in_process()
  void unregister();
};

// True when `path` has a write-ahead log with content that no live connection owns: the last
// writer died (killed, power loss) before it could checkpoint. Call before opening the file.
bool left_by_crashed_writer(const std::string& path);

// The message for SQLite result code `rc` whose OS error was `system_errno` (0 = none);
// `message` is SQLite's own text for it, when there is one. Exposed for tests.
std::string describe_sqlite_error(int rc, int system_errno, const char* message);
bool is_disk_full(int rc, int system_errno);

// A prepared statement, owned by the caller and short-lived. Bind indices start at 1 (SQLite's
// convention) while column indices start at 0.
class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind_int(int index, std::int64_t value);
  Statement& bind_double(int index, double value);
  // The text and blob are copied by SQLite, so temporaries are fine.
  Statement& bind_text(int index, std::string_view value);
  Statement& bind_blob(int index, std::span<const std::uint8_t> value);
  Statement& bind_null(int index);

  // Advances to the next row: true while a row is available, false when done.
  bool step();
  // Steps a statement that returns no rows.
  void run();
  // Ready for another execution; bindings are cleared.
  void reset();

  std::int64_t column_int(int index) const;
  double column_double(int index) const;
  std::string column_text(int index) const;
  // Valid until the next step(), reset() or destruction.
  std::span<const std::uint8_t> column_blob(int index) const;
  bool column_is_null(int index) const;

 private:
  Database* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// Begins a transaction on construction and rolls it back on destruction unless commit() was
// called, so an exception leaving the scope never leaves half a run behind.
class Transaction {
 public:
  enum class Mode : std::uint8_t {
    deferred,   // takes the write lock at the first write (read-mostly work)
    immediate,  // takes the write lock now, so a busy database fails here and not halfway
  };
  explicit Transaction(Database& db, Mode mode = Mode::immediate);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Commits; a second commit() is a logic error and throws DatabaseError.
  void commit();
  bool committed() const { return committed_; }

 private:
  Database& db_;
  bool committed_ = false;
};

}  // namespace fragscope::storage
