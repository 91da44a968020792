#include "gui/snapshot_import.h"

#include <QFileInfo>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "gui/job_tracker.h"
#include "storage/db/snapshot_import.h"

namespace fragscope::gui {

bool isSnapshotFile(const QString& path) {
  const QString lower = path.toLower();
  return lower.endsWith(QLatin1String(".pickle")) || lower.endsWith(QLatin1String(".pickle.gz")) ||
         lower.endsWith(QLatin1String(".pkl")) || lower.endsWith(QLatin1String(".pkl.gz"));
}

namespace {
QString runNameFor(const QString& filePath) {
  return QString::fromStdString(storage::run_name_for(filePath.toStdString()));
}
}  // namespace

ImportResult importSnapshotFile(const QString& databasePath, const QString& filePath,
                                const JobContext* job) {
  const auto cancelled = [&] {
    if (job && job->cancelled())
      throw InputError("import of " + filePath.toStdString() + " cancelled");
  };
  if (!QFileInfo::exists(filePath))
    throw InputError(filePath.toStdString() + ": no such file");
  if (job)
    job->progress(0.02);
  // Read (and validate) everything before touching the database, so a bad file writes nothing.
  const snapshot::Snapshot snap = snapshot::read_snapshot(filePath.toStdString());
  const std::optional<nlohmann::json> stats = storage::read_companion_stats(filePath.toStdString());
  const std::optional<nlohmann::json> fingerprint =
      storage::read_companion_environment(filePath.toStdString());
  cancelled();
  if (job)
    job->progress(0.5);

  ImportResult result;
  result.name = runNameFor(filePath);
  for (const std::string& warning : snap.warnings)
    result.warnings << QString::fromStdString(warning);

  storage::ImportOptions options;
  options.name = result.name.toStdString();
  options.source_file = QFileInfo(filePath).absoluteFilePath().toStdString();
  // The recording's own memory_stats() and cap go in with the run, in the same transaction.
  options.recorded_stats = stats;
  if (fingerprint) {  // fragscope-record's NAME.env.json: the environment the run was recorded in
    options.recorded_environment = fingerprint;
    options.recorded_environment_file = storage::companion_environment_path(options.source_file);
  }

  storage::RunStore store(databasePath.toStdString());
  const storage::ImportResult imported = storage::import_snapshot(store, snap, options);
  result.run = imported.run;
  result.events = imported.events;
  if (imported.truncated)
    result.warnings << QObject::tr(
        "The trace does not start at an empty allocator; the state before its first event was "
        "reconstructed from the final segments.");
  if (job)
    job->progress(1.0);
  return result;
}

}  // namespace fragscope::gui
