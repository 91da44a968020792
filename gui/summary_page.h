#pragma once
// Summary: the allocator state at the cursor as PyTorch prints it — torch.cuda.memory_summary() of
// the run replayed through the model up to the cursor event (storage::memory_stats_at, off the GUI
// thread, a newer cursor superseding the older replay) — then FragScope's own figures at the
// cursor (fragmentation, largest free block) and the run's record: environment, config, and the
// memory_stats() PyTorch recorded when the run has them.
#include <QCheckBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QTimer>
#include <QWidget>
#include <optional>

#include "gui/job_tracker.h"
#include "gui/run_data.h"

namespace fragscope::gui {

struct PyTorchSummaryAt;
// The text shown on the page under PyTorch's summary; also used by the reports. With `model`,
// the model's replay at the same event, its figures are used where the map's cannot be exact.
QString stateSummaryText(const storage::RunRecord& run, const SegmentSnapshotAt* state,
                         const QString& recordedEnvironment = {},
                         const PyTorchSummaryAt* model = nullptr);

// PyTorch's memory_summary() after the first `eventIndex` events of a run, with how it was
// obtained; loaded off the GUI thread.
struct PyTorchSummaryAt {
  storage::RunId run{};
  std::uint64_t eventIndex = 0;  // events replayed (the end of the allocator call at the cursor)
  std::uint64_t eventCount = 0;
  QString full;
  QString abbreviated;
  QString config;
  QString torchVersion;  // the release whose allocator rules the replay followed
  QStringList caveats;
  // The model diverged from the recording: the table is the model's; these are its figures at
  // the event, set beside the recording's own (the segment map's) on the page.
  bool diverged = false;
  std::int64_t modelReserved = 0;
  std::int64_t modelSegments = 0;
  std::int64_t modelRequested = 0;
  std::int64_t modelAllocations = 0;
  std::int64_t modelActiveBytes = 0;
  std::int64_t modelInactiveSplit = 0;
  // The environment the run was recorded in (fragscope-record's NAME.env.json), as text; empty
  // when the run has none.
  QString recordedEnvironment;
  // The replay started at event 0 for a cursor past the first keyframe interval: why the run has
  // no allocator-state keyframes (stats_keyframes.h); empty otherwise.
  QString noKeyframes;
};
// `cancel` stops the replay when a newer cursor or another run superseded it.
PyTorchSummaryAt loadPyTorchSummary(const QString& databasePath, storage::RunId run,
                                    std::uint64_t eventIndex, const CancelToken& cancel = {});
// The figures of FragScope's table at the cursor: the segment map's, and where a trace cannot
// tell them exactly those of `model`, the model's replay at the same event when it followed the
// recording: a trace records request sizes only, so the map infers each block's rounding by the
// split rule, which misses a block that took a whole small gap and whose neighbour was freed
// later (off by less than 1 MiB each); the replay has PyTorch's inactive_split_bytes itself.
SegmentMapSummary summaryFigures(const SegmentSnapshotAt& state, const PyTorchSummaryAt* model);
// When the model's replay diverged: the recording's figures at the cursor (the segment map's)
// beside the model's, so the page never shows the model's table as what PyTorch had.
QString divergenceText(const PyTorchSummaryAt& model, const SegmentSnapshotAt& recorded);

class SummaryPage : public QWidget {
  Q_OBJECT
 public:
  explicit SummaryPage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath) { m_databasePath = databasePath; }
  void setRun(const storage::RunRecord& run);
  void setState(const SegmentSnapshotAt& state);
  void clear();
  QString text() const { return m_text->toPlainText(); }
  // PyTorch's summary on screen, empty while none is loaded.
  const std::optional<PyTorchSummaryAt>& pytorchSummary() const { return m_pytorch; }
  bool busy() const { return m_replay.busy() || m_keyframes.busy() || m_debounce.isActive(); }
  // Why memory_summary() could not be computed for the cursor (empty when it was).
  const QString& replayError() const { return m_replayError; }

 signals:
  // PyTorch's summary for the current cursor is on screen.
  void pytorchSummaryReady();

 private:
  void requestReplay();
  void refresh();
  QString m_databasePath;
  std::optional<storage::RunRecord> m_run;
  std::optional<SegmentSnapshotAt> m_state;
  std::optional<PyTorchSummaryAt> m_pytorch;
  QString m_replayError;
  QCheckBox* m_abbreviated;
  QLabel* m_status;
  QPlainTextEdit* m_text;
  // Arrow-key stepping moves the cursor many times a second: replay once it rests.
  QTimer m_debounce;
  JobTracker m_replay{this};
  // A run stored without allocator-state keyframes (by a release before they were kept, or a
  // path that stores none: a replayed mitigation, a twin, a GPU run) gets them once, before its
  // first replay, so this and every later cursor replays at most one interval instead of the run
  // from event 0; the replay waits for it. Cancelled with the run.
  JobTracker m_keyframes{this};
};

}  // namespace fragscope::gui
