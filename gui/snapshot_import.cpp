#include "gui/snapshot_import.h"

#include <QApplication>
#include <QFileInfo>
#include <QInputDialog>
#include <QLocale>
#include <QPointer>
#include <QThread>
#include <QWidget>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "gui/job_tracker.h"
#include "storage/db/import_stages.h"
#include "storage/db/snapshot_import.h"
#include "usecases/import.h"

namespace fragscope::gui {

bool isSnapshotFile(const QString& path) {
  const QString lower = path.toLower();
  return lower.endsWith(QLatin1String(".pickle")) || lower.endsWith(QLatin1String(".pickle.gz")) ||
         lower.endsWith(QLatin1String(".pkl")) || lower.endsWith(QLatin1String(".pkl.gz"));
}

namespace {
void appendWarnings(QStringList& into, const std::vector<std::string>& warnings) {
  for (const std::string& warning : warnings)
    into << QString::fromStdString(warning);
}

QString runNameFor(const QString& filePath) {
  return QString::fromStdString(storage::run_name_for(filePath.toStdString()));
}
}  // namespace

std::vector<DeviceChoice> deviceChoices(const snapshot::Snapshot& snapshot) {
  std::vector<DeviceChoice> choices;
  for (std::size_t device = 0; device < snapshot.device_count(); ++device) {
    DeviceChoice choice;
    choice.device = device;
    choice.entries = snapshot.trace_size(device);
    for (const auto& segment : snapshot.segments)
      choice.segments += segment.device == static_cast<int>(device) ? 1 : 0;
    if (choice.entries == 0 && choice.segments == 0)
      continue;
    const QLocale locale;
    choice.label = QObject::tr("cuda:%1: %2 trace entries, %3 segments")
                       .arg(device)
                       .arg(locale.toString(static_cast<qulonglong>(choice.entries)))
                       .arg(choice.segments);
    if (choice.entries == 0)
      choice.label += QObject::tr(" (state only)");
    choices.push_back(choice);
  }
  return choices;
}

DevicePicker dialogDevicePicker(QWidget* parent) {
  QPointer<QWidget> owner = parent;
  return [owner](const std::vector<DeviceChoice>& choices,
                 const QString& fileName) -> std::optional<std::size_t> {
    std::optional<std::size_t> picked;
    const auto ask = [&] {
      QStringList labels;
      for (const DeviceChoice& choice : choices)
        labels << choice.label;
      bool ok = false;
      const QString label = QInputDialog::getItem(
          owner.data(), QObject::tr("Pick a device"),
          QObject::tr("%1 holds several devices. Import which one?").arg(fileName), labels, 0,
          false, &ok);
      if (ok && labels.contains(label))
        picked = choices[static_cast<std::size_t>(labels.indexOf(label))].device;
    };
    if (owner.isNull())
      return std::nullopt;
    if (QThread::currentThread() == owner->thread())
      ask();
    else
      QMetaObject::invokeMethod(owner.data(), ask, Qt::BlockingQueuedConnection);
    return picked;
  };
}

ImportResult importSnapshotFile(const QString& databasePath, const QString& filePath,
                                const JobContext* job, const DevicePicker& picker) {
  const auto cancelled = [&] {
    if (job && job->cancelled())
      throw InputError("import of " + filePath.toStdString() + " cancelled");
  };
  if (!QFileInfo::exists(filePath))
    throw InputError(filePath.toStdString() + ": no such file");
  if (job)
    job->progress(0.02);
  // Read (and validate) everything before touching the database, so a bad file writes nothing.
  const usecases::Recording recording = usecases::read_recording(filePath.toStdString());
  const snapshot::Snapshot& snap = recording.snapshot;
  cancelled();
  if (job)
    job->progress(0.5);

  ImportResult result;
  result.name = runNameFor(filePath);
  appendWarnings(result.warnings, snap.warnings);

  storage::ImportOptions options;
  options.name = result.name.toStdString();
  options.source_file = QFileInfo(filePath).absoluteFilePath().toStdString();
  if (const std::vector<DeviceChoice> choices = deviceChoices(snap); picker && choices.size() > 1) {
    options.device = picker(choices, QFileInfo(filePath).fileName());
    if (!options.device)
      throw InputError("import of " + filePath.toStdString() + " cancelled");
    result.name += QStringLiteral(" (cuda:%1)").arg(*options.device);
    options.name = result.name.toStdString();
  }
  cancelled();

  // The job's own token reaches every stage of the store, up to right before the commit; the
  // recording's stats and environment go in with the run, in the same transaction.
  WorkControl control;
  if (job)
    control.cancel = job->workControl().cancel;
  // Reading took the first half; the store's stages share the second.
  control.progress = fraction_progress(storage::kImportStages, [job](double fraction) {
    if (job)
      job->progress(0.5 + 0.5 * fraction);
  });
  storage::RunStore store(databasePath.toStdString());
  storage::ImportResult imported;
  try {
    imported = usecases::import_recording(store, recording, options, control);
  } catch (const Cancelled&) {
    throw InputError("import of " + filePath.toStdString() + " cancelled");
  }
  result.run = imported.run;
  result.events = imported.events;
  appendWarnings(result.warnings, imported.warnings);
  if (imported.truncated)
    result.warnings << QObject::tr(
        "The trace does not start at an empty allocator; the state before its first event was "
        "reconstructed from the final segments.");
  if (job)
    job->progress(1.0);
  return result;
}

}  // namespace fragscope::gui
