#pragma once
// Importing a PyTorch memory snapshot (.pickle / .pickle.gz) into the database: the one code
// path behind File ▸ Open, drag and drop and the tests. It reads the snapshot with the engine's
// reader and stores it with storage::import_snapshot (the same as `fragscope-cli import`: the
// device with the most trace entries, PyTorch's exact counters, one transaction); a cancelled
// import leaves no run behind. A `NAME.stats.json` next to `NAME.pickle.gz`
// (what tests/fixtures/record_torch_traces.py writes) adds the recorded memory_stats(),
// allocator config, device and PyTorch/CUDA versions to the run.
#include <QString>
#include <QStringList>

#include <functional>
#include <optional>
#include <vector>

#include "storage/db/run_store.h"

class QWidget;

namespace fragscope::snapshot {
struct Snapshot;
}

namespace fragscope::gui {

class JobContext;

struct ImportResult {
  storage::RunId run{};
  QString name;
  std::uint64_t events = 0;
  QStringList warnings;
};

// One device of a multi-device snapshot, as the picker offers it.
struct DeviceChoice {
  std::size_t device = 0;
  std::uint64_t entries = 0;
  std::size_t segments = 0;
  QString label;  // "cuda:1: 12,345 trace entries, 40 segments"
};
// Every device that has trace entries or segments, in device order.
std::vector<DeviceChoice> deviceChoices(const snapshot::Snapshot& snapshot);

// Asked (on the import's worker thread) when a snapshot has more than one device with content:
// the device to import, or nullopt to cancel the import.
using DevicePicker = std::function<std::optional<std::size_t>(const std::vector<DeviceChoice>&,
                                                              const QString& fileName)>;
// A picker that asks the user in a dialog over `parent`, on the GUI thread, while the worker
// waits for the answer.
DevicePicker dialogDevicePicker(QWidget* parent);

// True for the file names the importer accepts (by suffix).
bool isSnapshotFile(const QString& path);
// Throws fragscope::InputError naming the file on bad input, and an InputError saying
// "cancelled" when `job` was cancelled or the picker declined (nothing is written then).
// Without a picker the device with the most trace entries is imported.
ImportResult importSnapshotFile(const QString& databasePath, const QString& filePath,
                                const JobContext* job = nullptr, const DevicePicker& picker = {});

}  // namespace fragscope::gui
