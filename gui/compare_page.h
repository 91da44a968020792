#pragma once
// Compare: two or more runs side by side — reserved and allocated overlaid on one plot, small
// multiples on a shared y scale, and a metrics table aligned by metric with every value that
// differs from the first (baseline) run highlighted. A banner warns when the runs differ in
// environment or allocator config, because then a difference may not be the workload's.
#include <QAbstractTableModel>
#include <QComboBox>
#include <QGridLayout>
#include <QLabel>
#include <QTableView>
#include <QWidget>
#include <optional>
#include <vector>

#include "engine/analysis/compare.h"
#include "engine/analysis/recorded_environment.h"

#include "gui/job_tracker.h"
#include "gui/metatypes.h"
#include "gui/run_data.h"
#include "storage/db/run_store.h"

class QCustomPlot;
class QCPGraph;
class QScrollArea;
class QTabWidget;

namespace fragscope::gui {

class SettingsModel;
class SegmentMapWidget;

struct ComparedRun {
  storage::RunRecord record;
  std::vector<storage::TimelineBucket> timeline;
  std::size_t oomCount = 0;
  // fragscope-record's fingerprint, when the run has one: warnings then go point by point.
  std::optional<analysis::RecordedEnvironment> recordedEnvironment;
  // The compare use case's measurement (the numbers `fragscope-cli compare` prints); absent for
  // runs built by hand, whose table rows then come from the recorded summary.
  std::optional<analysis::RunProfile> profile;
  // Where the run ran out of memory (event indices and their times, 0 = unknown).
  std::vector<std::uint64_t> oomEvents;
  std::vector<std::int64_t> oomTimesUs;
  // What lines runs up by optimizer step: a simulated run's first event of every step, or a
  // recording's step end times (fragscope-record's step_ends_us); both empty when unknown.
  std::vector<std::uint64_t> stepFirstEvents;
  std::vector<std::uint64_t> stepEndsUs;
  std::int64_t firstTimeUs = 0;  // 0: the trace has no times
  // The allocator at the event where reserved peaked (empty views when the layout is unknown).
  std::optional<SegmentSnapshotAt> atPeak;
};

struct ComparisonData {
  std::vector<ComparedRun> runs;
  // The compare use case's table (every metric `fragscope-cli compare` prints), phases and
  // warnings; empty for data built by hand.
  analysis::Comparison comparison;
};

ComparisonData loadComparison(const QString& databasePath, const std::vector<storage::RunId>& runs,
                              std::size_t buckets, const JobContext* job = nullptr);
// Human-readable differences in config and environment between the baseline (first) run and the
// others; empty when they match.
QStringList comparisonWarnings(const ComparisonData& data);

// Rows are metrics, columns are runs (the first is the baseline).
class ComparisonModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Role { SortRole = Qt::UserRole, ValueRole, DiffersRole };
  explicit ComparisonModel(QObject* parent = nullptr);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  void resetData(const ComparisonData& data);
  void clearData();

 private:
  enum class Unit { bytes, ratio, count, times };
  struct Metric {
    QString name;
    Unit unit = Unit::bytes;
    std::vector<double> values;  // NaN: unknown for that run
    // Less is better (memory, OOMs): differences are green or red. Otherwise (event counts: a
    // run that did not stop at an OOM has more) they are only marked as different.
    bool lowerIsBetter = true;
  };
  std::vector<QString> m_runNames;
  std::vector<Metric> m_metrics;
};

class ComparePage : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath);
  // `story` (HTML, may be empty) explains above the comparison what the runs show (the case
  // study's two stories).
  void setRuns(const std::vector<storage::RunId>& runs, const QString& story = QString());
  QLabel* storyLabel() const { return m_story; }
  void clear();
  // Whether the page shows `run` (deleting it must clear the page).
  bool containsRun(storage::RunId run) const;
  const ComparisonData& data() const { return m_data; }
  ComparisonModel* model() const { return m_model; }
  QCustomPlot* overlayPlot() const { return m_overlay; }
  // The overlay's x axis: event index, each run's share of its own events (0-100 %), optimizer
  // step or seconds; the combo box's items in CompareAxis order.
  int overlayAxis() const { return m_overlayAxis->currentIndex(); }
  bool overlayByShare() const;
  QComboBox* overlayAxisChoice() const { return m_overlayAxis; }
  // Runs the chosen axis cannot place ("x: no optimizer steps recorded"); empty when all drawn.
  QLabel* axisNote() const { return m_axisNote; }
  // The overlay's reserved curve of each run (the allocated one is dashed, not in the legend),
  // its OOM marks (nullptr for a run without OOM on this axis) and the memory-limit lines.
  const std::vector<QCPGraph*>& reservedGraphs() const { return m_reservedGraphs; }
  const std::vector<QCPGraph*>& oomGraphs() const { return m_oomGraphs; }
  const std::vector<QCPGraph*>& limitGraphs() const { return m_limitGraphs; }
  QTabWidget* tabs() const { return m_tabs; }
  SettingsModel* settingsModel() const { return m_settings; }
  // One segment map per run at its reserved peak (null for a run whose layout is unknown).
  const std::vector<SegmentMapWidget*>& peakMaps() const { return m_peakMaps; }
  bool busy() const { return m_job.busy(); }

 signals:
  void dataReady();
  void errorOccurred(const QString& message);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void showData(ComparisonData data);
  void plotOverlay();
  void showPeakMaps();

  QString m_databasePath;
  ComparisonData m_data;
  QLabel* m_story;
  QLabel* m_header;
  QLabel* m_warning;
  QCustomPlot* m_overlay;
  QWidget* m_multiples;
  QGridLayout* m_multiplesLayout;
  ComparisonModel* m_model;
  QTableView* m_table;
  SettingsModel* m_settings;
  QTableView* m_settingsTable;
  QTabWidget* m_tabs;
  QScrollArea* m_peakArea;
  QWidget* m_peakMapsBox;
  QGridLayout* m_peakLayout;
  std::vector<SegmentMapWidget*> m_peakMaps;
  QLabel* m_axisNote;
  QComboBox* m_overlayAxis;
  std::vector<QCPGraph*> m_reservedGraphs;
  std::vector<QCPGraph*> m_oomGraphs;
  std::vector<QCPGraph*> m_limitGraphs;
  JobTracker m_job{this};
};

}  // namespace fragscope::gui
