#include "storage/db/database.h"

#include <sqlite3.h>

#include <utility>

namespace fragscope::storage {
namespace {

// How long a connection waits for another connection's write lock before reporting "locked".
constexpr int kBusyTimeoutMs = 5000;

std::string describe(int rc, sqlite3* db) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      return "not a database (the file is not SQLite, or it is encrypted)";
    case SQLITE_CORRUPT:
      return "the database file is corrupt (" + std::string(sqlite3_errstr(rc)) + ")";
    case SQLITE_FULL:
      return "the disk or the database is full; the change was rolled back";
    case SQLITE_READONLY:
      return "the database is read-only";
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return "the database is locked by another writer (waited " +
             std::to_string(kBusyTimeoutMs / 1000) + " s)";
    case SQLITE_CANTOPEN:
      return "cannot open the database file";
    case SQLITE_IOERR:
      return "I/O error (" + std::string(sqlite3_errstr(rc)) + ")";
    default:
      break;
  }
  if (db != nullptr && sqlite3_errcode(db) == rc)
    return sqlite3_errmsg(db);
  return sqlite3_errstr(rc);
}

}  // namespace

Database::Database(const std::string& path, OpenMode mode) : path_(path) {
  int flags = SQLITE_OPEN_NOMUTEX;  // one thread per connection, see the header
  switch (mode) {
    case OpenMode::read_write_create:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
    case OpenMode::read_write:
      flags |= SQLITE_OPEN_READWRITE;
      break;
    case OpenMode::read_only:
      flags |= SQLITE_OPEN_READONLY;
      break;
  }
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = describe(rc, db_);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw DatabaseError(path_ + ": " + message);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
}

Database::~Database() {
  sqlite3_close_v2(db_);
}

void Database::fail(int rc, std::string_view context) const {
  // "Not a database" is about the whole file, whatever statement found out.
  std::string message = (rc & 0xff) == SQLITE_NOTADB
                            ? path_ + ": " + describe(rc, db_)
                            : path_ + ": " + std::string(context) + ": " + describe(rc, db_);
  if ((rc & 0xff) == SQLITE_FULL)
    throw DatabaseFullError(message);
  throw DatabaseError(message);
}

void Database::exec(std::string_view sql) {
  const std::string text(sql);
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    sqlite3_free(error);
    fail(rc, "executing " + text.substr(0, text.find_first_of("(\n")));
  }
}

Statement Database::prepare(std::string_view sql) {
  return Statement(*this, sql);
}

std::int64_t Database::query_int(std::string_view sql) {
  Statement statement(*this, sql);
  if (!statement.step())
    throw DatabaseError(path_ + ": no result from " + std::string(sql));
  return statement.column_int(0);
}

std::int64_t Database::last_insert_rowid() const {
  return sqlite3_last_insert_rowid(db_);
}

std::int64_t Database::changes() const {
  return sqlite3_changes64(db_);
}

bool Database::read_only() const {
  return sqlite3_db_readonly(db_, "main") == 1;
}

bool Database::in_transaction() const {
  return sqlite3_get_autocommit(db_) == 0;
}

Statement::Statement(Database& db, std::string_view sql) : db_(&db) {
  const char* tail = nullptr;
  const int rc =
      sqlite3_prepare_v2(db.db_, sql.data(), static_cast<int>(sql.size()), &stmt_, &tail);
  if (rc != SQLITE_OK)
    db.fail(rc, "preparing '" + std::string(sql) + "'");
  // A second statement after the first would be silently ignored; refuse it instead.
  if (tail != nullptr && std::string_view(tail).find_first_not_of(" \t\r\n;") != std::string::npos)
    throw DatabaseError(db.path() + ": more than one SQL statement in '" + std::string(sql) + "'");
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

Statement& Statement::bind_int(int index, std::int64_t value) {
  if (const int rc = sqlite3_bind_int64(stmt_, index, value); rc != SQLITE_OK)
    db_->fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_double(int index, double value) {
  if (const int rc = sqlite3_bind_double(stmt_, index, value); rc != SQLITE_OK)
    db_->fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_text(int index, std::string_view value) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK)
    db_->fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_blob(int index, std::span<const std::uint8_t> value) {
  // A zero-length blob is still a blob, not NULL: SQLite needs a non-null pointer for that.
  static const std::uint8_t kEmpty = 0;
  const void* data = value.empty() ? &kEmpty : value.data();
  if (const int rc = sqlite3_bind_blob64(stmt_, index, data, value.size(), SQLITE_TRANSIENT);
      rc != SQLITE_OK)
    db_->fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_null(int index) {
  if (const int rc = sqlite3_bind_null(stmt_, index); rc != SQLITE_OK)
    db_->fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW)
    return true;
  if (rc == SQLITE_DONE)
    return false;
  const std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
  sqlite3_reset(stmt_);
  db_->fail(rc, "running '" + sql.substr(0, 60) + (sql.size() > 60 ? "...'" : "'"));
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::int64_t Statement::column_int(int index) const {
  return sqlite3_column_int64(stmt_, index);
}

double Statement::column_double(int index) const {
  return sqlite3_column_double(stmt_, index);
}

std::string Statement::column_text(int index) const {
  const auto* text = sqlite3_column_text(stmt_, index);
  const int size = sqlite3_column_bytes(stmt_, index);
  return text ? std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(size))
              : std::string();
}

std::span<const std::uint8_t> Statement::column_blob(int index) const {
  const auto* data = static_cast<const std::uint8_t*>(sqlite3_column_blob(stmt_, index));
  const int size = sqlite3_column_bytes(stmt_, index);
  return data ? std::span<const std::uint8_t>(data, static_cast<std::size_t>(size))
              : std::span<const std::uint8_t>();
}

bool Statement::column_is_null(int index) const {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

Transaction::Transaction(Database& db, Mode mode) : db_(db) {
  db_.exec(mode == Mode::immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED");
}

Transaction::~Transaction() {
  if (!committed_ && db_.in_transaction()) {
    // ROLLBACK cannot usefully fail here; a destructor must not throw.
    try {
      db_.exec("ROLLBACK");
    } catch (const DatabaseError&) {
    }
  }
}

void Transaction::commit() {
  if (committed_)
    throw DatabaseError(db_.path() + ": transaction committed twice");
  db_.exec("COMMIT");
  committed_ = true;
}

}  // namespace fragscope::storage
