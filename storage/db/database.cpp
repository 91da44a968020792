#include "storage/db/database.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

namespace fragscope::storage {
namespace {

// How long a connection waits for another connection's write lock before reporting "locked".
constexpr int kBusyTimeoutMs = 5000;

}  // namespace

bool is_disk_full(int rc, int system_errno) {
  // SQLite says SQLITE_FULL where it writes pages; where it grows the WAL index, syncs, truncates
  // or creates a journal on a full disk it says "disk I/O error" (SQLITE_IOERR_*) or "cannot
  // open", and only the OS error tells.
  // SQLite keeps the last OS error until the next one: it belongs to I/O and open failures only.
  const int primary = rc & 0xff;
  return primary == SQLITE_FULL || ((primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN) &&
                                    (system_errno == ENOSPC || system_errno == EDQUOT));
}

std::string describe_sqlite_error(int rc, int system_errno, const char* message) {
  if (is_disk_full(rc, system_errno)) {
    return (rc & 0xff) != SQLITE_FULL && system_errno == EDQUOT
               ? "the disk quota is exhausted; the change was rolled back"
               : "the disk is full; the change was rolled back";
  }
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      return "not a database (the file is not SQLite, or it is encrypted)";
    case SQLITE_CORRUPT:
      return "the database file is corrupt (" + std::string(sqlite3_errstr(rc)) + ")";
    case SQLITE_READONLY:
      return "the database is read-only";
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return "the database is locked by another writer (waited " +
             std::to_string(kBusyTimeoutMs / 1000) + " s)";
    case SQLITE_CANTOPEN:
      return "cannot open the database file";
    case SQLITE_IOERR:
      return "I/O error (" + std::string(sqlite3_errstr(rc)) +
             (system_errno > 0 ? ": " + std::string(std::strerror(system_errno)) : "") + ")";
    default:
      break;
  }
  if (message != nullptr)
    return message;
  return sqlite3_errstr(rc);
}

namespace {

std::string describe(int rc, sqlite3* db) {
  const bool own = db != nullptr && sqlite3_extended_errcode(db) == rc;
  return describe_sqlite_error(rc, db != nullptr ? sqlite3_system_errno(db) : 0,
                               own ? sqlite3_errmsg(db) : nullptr);
}

// The files this process has open, so that one connection can tell whether it is the first
// (open_store_database checks a file left by a crashed writer only then).
std::mutex open_files_mutex;
std::map<std::string, int>& open_files() {
  static std::map<std::string, int> files;
  return files;
}

std::string file_key(const std::string& path) {
  std::error_code error;
  const auto canonical = std::filesystem::weakly_canonical(path, error);
  return error ? path : canonical.string();
}

}  // namespace

bool left_by_crashed_writer(const std::string& path) {
  if (path == ":memory:" || path.empty())
    return false;
  std::error_code error;
  const auto wal_size = std::filesystem::file_size(path + "-wal", error);
  if (error || wal_size == 0)
    return false;  // the last connection closed cleanly (it checkpoints and removes the WAL)
  const std::lock_guard lock(open_files_mutex);
  // Closing any descriptor of a file drops every POSIX lock this process holds on it, SQLite's
  // included: probe only while no connection of ours has the file open (the mutex keeps it so).
  if (open_files().count(file_key(path)) != 0)
    return false;
  const std::string shm = path + "-shm";
  const int fd = ::open(shm.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return true;  // a WAL with content and nobody's WAL index: its writer died
  // Every live connection holds a read lock on the WAL index's "DMS" byte (offset 128).
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = 128;
  probe.l_len = 1;
  const bool probed = ::fcntl(fd, F_GETLK, &probe) == 0;
  ::close(fd);
  return probed && probe.l_type == F_UNLCK;
}

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
  if (path_ != ":memory:" && !path_.empty()) {
    // Registered before opening, so left_by_crashed_writer() never probes beside an open.
    file_key_ = file_key(path_);
    const std::lock_guard lock(open_files_mutex);
    ++open_files()[file_key_];
  }
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = describe(rc, db_);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    unregister();
    throw DatabaseError(path_ + ": " + message);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
}

Database::~Database() {
  sqlite3_close_v2(db_);
  unregister();
}

void Database::unregister() {
  if (file_key_.empty())
    return;
  const std::lock_guard lock(open_files_mutex);
  if (--open_files()[file_key_] == 0)
    open_files().erase(file_key_);
  file_key_.clear();
}

bool Database::only_connection_in_process() const {
  if (file_key_.empty())
    return true;
  const std::lock_guard lock(open_files_mutex);
  const auto it = open_files().find(file_key_);
  return it == open_files().end() || it->second <= 1;
}

std::size_t Database::open_statements() const {
  std::size_t count = 0;
  for (sqlite3_stmt* stmt = sqlite3_next_stmt(db_, nullptr); stmt != nullptr;
       stmt = sqlite3_next_stmt(db_, stmt))
    ++count;
  return count;
}

void Database::fail(int rc, std::string_view context) const {
  // "Not a database" is about the whole file, whatever statement found out.
  std::string message = (rc & 0xff) == SQLITE_NOTADB
                            ? path_ + ": " + describe(rc, db_)
                            : path_ + ": " + std::string(context) + ": " + describe(rc, db_);
  if (is_disk_full(rc, sqlite3_system_errno(db_)))
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
  if (tail != nullptr &&
      std::string_view(tail, static_cast<std::size_t>(sql.data() + sql.size() - tail))
              .find_first_not_of(" \t\r\n;") != std::string::npos) {
    // The destructor does not run for a constructor that throws: finalize here, or the
    // connection can never be closed (a leak, and a zombie handle on the file).
    sqlite3_finalize(std::exchange(stmt_, nullptr));
    throw DatabaseError(db.path() + ": more than one SQL statement in '" + std::string(sql) + "'");
  }
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
