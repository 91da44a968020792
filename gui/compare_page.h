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
#include "storage/db/run_store.h"

class QCustomPlot;

namespace fragscope::gui {

struct ComparedRun {
  storage::RunRecord record;
  std::vector<storage::TimelineBucket> timeline;
  std::size_t oomCount = 0;
  // fragscope-record's fingerprint, when the run has one: warnings then go point by point.
  std::optional<analysis::RecordedEnvironment> recordedEnvironment;
  // The compare use case's measurement (the numbers `fragscope-cli compare` prints); absent for
  // runs built by hand, whose table rows then come from the recorded summary.
  std::optional<analysis::RunProfile> profile;
};

struct ComparisonData {
  std::vector<ComparedRun> runs;
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
  struct Metric {
    QString name;
    bool isBytes = false;
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
  const ComparisonData& data() const { return m_data; }
  ComparisonModel* model() const { return m_model; }
  QCustomPlot* overlayPlot() const { return m_overlay; }
  // The overlay's x axis: each run's share of its own events (0-100 %) rather than event indices.
  bool overlayByShare() const;
  QComboBox* overlayAxisChoice() const { return m_overlayAxis; }
  bool busy() const { return m_job.busy(); }

 signals:
  void dataReady();
  void errorOccurred(const QString& message);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void showData(ComparisonData data);
  void plotOverlay();

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
  QComboBox* m_overlayAxis;
  JobTracker m_job{this};
};

}  // namespace fragscope::gui
