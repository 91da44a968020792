#include "gui/snapshot_import.h"

#include <QFile>
#include <QFileInfo>
#include <algorithm>
#include <chrono>
#include <fstream>

#include "engine/core/error.h"
#if FRAGSCOPE_HAVE_SNAPSHOT_READER
#include "engine/snapshot/snapshot.h"
#endif
#include "fragscope/version.h"
#include "gui/job_tracker.h"

namespace fragscope::gui {

bool isSnapshotFile(const QString& path) {
  const QString lower = path.toLower();
  return lower.endsWith(QLatin1String(".pickle")) || lower.endsWith(QLatin1String(".pickle.gz")) ||
         lower.endsWith(QLatin1String(".pkl")) || lower.endsWith(QLatin1String(".pkl.gz"));
}

#if FRAGSCOPE_HAVE_SNAPSHOT_READER
namespace {
// Events per append_events() call: small enough to poll cancellation and report progress
// often, large enough that the per-call overhead does not show.
constexpr std::size_t kImportBatch = 16384;

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
  const auto started = std::chrono::steady_clock::now();
  if (!QFileInfo::exists(filePath))
    throw InputError(filePath.toStdString() + ": no such file");
  if (job)
    job->progress(0.02);
  snapshot::Snapshot snap = snapshot::read_snapshot(filePath.toStdString());
  if (job && job->cancelled())
    throw InputError("import of " + filePath.toStdString() + " cancelled");
  if (job)
    job->progress(0.4);

  ImportResult result;
  result.name = runNameFor(filePath);
  for (const std::string& warning : snap.warnings)
    result.warnings << QString::fromStdString(warning);

  std::size_t device = 0;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d)
    if (snap.device_traces[d].size() > snap.device_traces[device].size())
      device = d;
  if (snap.device_traces.size() > 1)
    result.warnings << QObject::tr("The snapshot has %1 devices; imported device %2.")
                           .arg(snap.device_traces.size())
                           .arg(device);
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      snap.device_traces.empty() ? kNoEvents : snap.device_traces[device];

  storage::RunRecord record;
  record.name = result.name.toStdString();
  record.source = storage::RunSource::imported;
  record.environment = storage::Environment::current();
  const nlohmann::json stats = companionStats(filePath);
  nlohmann::json summary = nlohmann::json::object();
  if (stats.is_object()) {
    record.alloc_config = stringField(stats, "alloc_conf");
    record.device_name = stringField(stats, "device");
    record.environment.torch_version = stringField(stats, "torch");
    record.environment.cuda_version = stringField(stats, "cuda");
    record.environment.gpu_name = record.device_name;
    if (stats.contains("total_memory") && stats["total_memory"].is_number_unsigned())
      record.environment.gpu_memory = stats["total_memory"].get<Bytes>();
    if (stats.contains("memory_stats"))
      summary["memory_stats"] = stats["memory_stats"];
    if (stats.contains("outcome"))
      summary["outcome"] = stats["outcome"];
  }
  summary["source_file"] = QFileInfo(filePath).fileName().toStdString();
  const bool ooms = std::any_of(events.begin(), events.end(),
                                [](const TraceEvent& e) { return e.action == TraceAction::oom; });

  storage::RunStore store(databasePath.toStdString());
  const storage::RunId run = store.begin_run(record);
  try {
    std::vector<std::vector<storage::StackFrame>> stacks;
    stacks.reserve(snap.frames.stack_count());
    for (std::size_t s = 1; s < snap.frames.stack_count(); ++s) {
      std::vector<storage::StackFrame> frames;
      for (const snapshot::Frame& frame :
           snap.frames.stack_frames(FrameStackId(static_cast<std::uint32_t>(s))))
        frames.push_back({frame.filename, frame.line, frame.name});
      stacks.push_back(std::move(frames));
    }
    if (!stacks.empty())
      store.set_frame_stacks(run, stacks);
    for (std::size_t first = 0; first < events.size(); first += kImportBatch) {
      if (job && job->cancelled()) {
        store.cancel_run(run);
        throw InputError("import of " + filePath.toStdString() + " cancelled");
      }
      const std::size_t count = std::min(kImportBatch, events.size() - first);
      store.append_events(run, std::span<const TraceEvent>(events.data() + first, count));
      if (job)
        job->progress(0.4 + 0.55 * static_cast<double>(first + count) /
                                static_cast<double>(events.size()));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const storage::RunRecord finished = store.finish_run(
        run, ooms ? storage::RunStatus::oom : storage::RunStatus::ok, summary, seconds);
    result.run = finished.id;
    result.events = finished.event_count;
  } catch (...) {
    if (store.ingesting())
      store.cancel_run(run);
    throw;
  }
  if (job)
    job->progress(1.0);
  return result;
}

#else
// Built before engine/snapshot had its reader: say so instead of pretending.
ImportResult importSnapshotFile(const QString&, const QString& filePath, const JobContext*) {
  throw InputError(filePath.toStdString() +
                   ": this build of FragScope has no PyTorch snapshot reader (engine/snapshot)");
}
#endif

}  // namespace fragscope::gui
