// A run's recorded environment fingerprint (table run_environments, migration 4): written by
// RunWriter, read by RunReader.
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "storage/db/run_reader.h"
#include "storage/db/run_store_internal.h"
#include "storage/db/run_writer.h"

namespace fragscope::storage {

void RunWriter::set_recorded_environment(RunId run, const nlohmann::json& fingerprint,
                                         const std::string& source_file) {
  const auto write = [&] {
    auto insert = db_.prepare(
        "INSERT OR REPLACE INTO run_environments(run_id, source_file, fingerprint) VALUES (?, ?, "
        "?)");
    insert.bind_int(1, run.value).bind_text(2, source_file).bind_text(3, fingerprint.dump());
    insert.run();
  };
  if (ingesting()) {
    ingest_for(run);  // only the run being written
    try {
      write();
    } catch (...) {
      cancel_run(run);  // a failed write leaves the transaction unusable: roll the run back
      throw;
    }
    return;
  }
  run_store_detail::require_run(db_, run);
  Transaction transaction(db_);
  write();
  transaction.commit();
}

std::optional<nlohmann::json> RunReader::recorded_environment(RunId run) {
  run_store_detail::require_run(db_, run);
  auto query = db_.prepare("SELECT fingerprint FROM run_environments WHERE run_id = ?");
  query.bind_int(1, run.value);
  if (!query.step())
    return std::nullopt;
  const std::string text = query.column_text(0);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) +
                        ": stored environment fingerprint is not valid JSON: " + error.what());
  }
}

}  // namespace fragscope::storage
