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

#include "storage/db/run_store.h"

namespace fragscope::gui {

class JobContext;

struct ImportResult {
  storage::RunId run{};
  QString name;
  std::uint64_t events = 0;
  QStringList warnings;
};

// True for the file names the importer accepts (by suffix).
bool isSnapshotFile(const QString& path);
// Throws fragscope::InputError naming the file on bad input, and an InputError saying
// "cancelled" when `job` was cancelled (nothing is written then).
ImportResult importSnapshotFile(const QString& databasePath, const QString& filePath,
                                const JobContext* job = nullptr);

}  // namespace fragscope::gui
