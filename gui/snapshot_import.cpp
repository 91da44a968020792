#include "gui/snapshot_import.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <algorithm>
#include <fstream>

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
  QString name = QFileInfo(filePath).fileName();
  for (const char* suffix : {".pickle.gz", ".pickle", ".pkl.gz", ".pkl"})
    if (name.endsWith(QLatin1String(suffix), Qt::CaseInsensitive))
      return name.left(name.size() - static_cast<qsizetype>(std::strlen(suffix)));
  return name;
}

// NAME.stats.json beside NAME.pickle.gz, when there is one.
nlohmann::json companionStats(const QString& filePath) {
  const QFileInfo info(filePath);
  const QString stats = info.dir().filePath(runNameFor(filePath) + QStringLiteral(".stats.json"));
  std::ifstream in(stats.toStdString());
  if (!in)
    return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(stats.toStdString() + ": not valid JSON: " + error.what());
  }
}

std::string stringField(const nlohmann::json& json, const char* key) {
  if (!json.is_object())
    return {};
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
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
  const nlohmann::json stats = companionStats(filePath);
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
  if (stats.is_object()) {
    storage::Environment environment = storage::Environment::current();
    environment.torch_version = stringField(stats, "torch");
    environment.cuda_version = stringField(stats, "cuda");
    environment.gpu_name = stringField(stats, "device");
    if (stats.contains("total_memory") && stats["total_memory"].is_number_unsigned())
      environment.gpu_memory = stats["total_memory"].get<Bytes>();
    options.environment = environment;
  }

  storage::RunStore store(databasePath.toStdString());
  const storage::ImportResult imported = storage::import_snapshot(store, snap, options);
  result.run = imported.run;
  result.events = imported.events;
  if (imported.truncated)
    result.warnings << QObject::tr(
        "The trace does not start at an empty allocator; the state before its first event was "
        "reconstructed from the final segments.");
  try {
    cancelled();
    if (stats.is_object()) {
      // What PyTorch itself reported after the run, shown beside FragScope's figures.
      nlohmann::json summary = store.run(imported.run).summary;
      if (stats.contains("memory_stats"))
        summary["memory_stats"] = stats["memory_stats"];
      if (stats.contains("outcome"))
        summary["recorded_outcome"] = stats["outcome"];
      if (stats.contains("alloc_conf"))
        summary["recorded_alloc_conf"] = stats["alloc_conf"];
      // record_torch_traces.py's cap: set_per_process_memory_fraction to exactly cap_gib GiB.
      const auto params = stats.find("params");
      if (params != stats.end() && params->is_object() && params->contains("cap_gib") &&
          (*params)["cap_gib"].is_number())
        summary["allowed_bytes"] =
            static_cast<Bytes>((*params)["cap_gib"].get<double>() * static_cast<double>(kGiB));
      store.update_summary(imported.run, summary);
    }
  } catch (...) {
    // Cancelled (or failed) after the run was committed: take it out again.
    store.delete_run(imported.run);
    throw;
  }
  if (job)
    job->progress(1.0);
  return result;
}

}  // namespace fragscope::gui
