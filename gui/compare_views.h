#pragma once
// What the Compare page shows beside its overlay: how runs line up on the x axis (event index,
// share of each run, optimizer step, time), where each run ran out of memory and its memory
// limit on that axis, and the "What differs" table — the workload (batch, accumulation,
// checkpointing, compile, ...) and allocator settings of every run side by side, so a reader
// sees why the curves differ before reading them.
#include <QAbstractTableModel>
#include <QString>
#include <QVector>
#include <optional>
#include <vector>

#include "gui/compare_page.h"

class QCPGraph;
class QCustomPlot;
class QColor;

namespace fragscope::gui {

enum class CompareAxis { events, share, steps, time };
QString axisLabel(CompareAxis axis);

// Where a run's event (at time `timeUs`, 0 = unknown) falls on `axis`; nullopt when the run lacks
// what the axis needs. Steps: a simulated run's first event of every optimizer step (step k + the
// share of step k's events gone by; the setup before step 0 is [-1, 0)) or a recording's step
// end times (job_page's stepCoordinate). Time: seconds since the run's first event.
std::optional<double> compareKey(const ComparedRun& run, CompareAxis axis, std::uint64_t event,
                                 std::int64_t timeUs);
// Why `run` is not drawn on `axis` ("no step boundaries recorded"), or empty when it is.
QString axisGap(const ComparedRun& run, CompareAxis axis);
// The axis a comparison opens on: by step when every run knows its steps (runs of different
// batch sizes make different numbers of events per step), else by share when their lengths differ
// more than twice, else by event index.
CompareAxis preferredAxis(const ComparisonData& data);

// One run's curves on an axis: bucket starts (and the run's end) with their reserved and
// allocated maxima, and its OOMs (x, reserved there).
struct RunCurves {
  QVector<double> keys, reserved, allocated;
  QVector<double> oomKeys, oomValues;
  double lastKey = 0;
};
// Empty keys when the run cannot be drawn on `axis`.
RunCurves runCurves(const ComparedRun& run, CompareAxis axis);

// "#3 mitigated": every header, legend and title names a run by id and name (names repeat).
QString compareRunLabel(const ComparedRun& run);
// One run's reserved (solid) and allocated (dashed, not in the legend) curves on `axis` in
// `color`; returns the reserved graph, or nullptr when the run cannot be placed on the axis.
QCPGraph* plotRunCurves(QCustomPlot* plot, const ComparedRun& run, const QColor& color,
                        CompareAxis axis, const QString& name);
// The run's OOMs as red crosses on its reserved curve; nullptr for a run without OOM on `axis`.
QCPGraph* plotRunOoms(QCustomPlot* plot, const ComparedRun& run, const QColor& color,
                      CompareAxis axis);
// What the plots' y axes must hold: the highest reserved peak, and a memory limit only when it is
// near (a 39 GiB device under a 300 MiB run would flatten every curve).
double comparisonTop(const ComparisonData& data);
// One dotted line from `left` to `right` per distinct memory limit of the runs, named as PyTorch
// says it ("6.00 GiB allowed", with the runs' names when the limits differ, ", above the plot"
// when it is over `top`).
std::vector<QCPGraph*> plotMemoryLimits(QCustomPlot* plot, const ComparisonData& data, double left,
                                        double right, double top);

// One setting of the runs side by side ("Micro-batch": 16, 8, ...).
struct SettingRow {
  QString group;                // "Workload", "Allocator", "Device"
  QString setting;              // what it is, e.g. "Micro-batch (training.batch_size)"
  std::vector<QString> values;  // per run; "—" where the run does not say
  bool differs = false;
};
// The workload (a simulated run's resolved configuration), allocator settings (the config each
// run ran under, storage::allocator_config_of) and device of every run. The settings people vary to
// fit in memory — batch, accumulation, sequence length, checkpointing, compile, optimizer,
// precision — are always listed; any other configuration key only where the runs differ.
std::vector<SettingRow> settingRows(const ComparisonData& data);

class SettingsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Role { DiffersRole = Qt::UserRole };
  explicit SettingsModel(QObject* parent = nullptr);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  void resetData(const ComparisonData& data);
  // The row of `setting` (its label before any " ("), or -1.
  int rowOf(const QString& setting) const;

 private:
  std::vector<QString> m_runNames;
  std::vector<SettingRow> m_rows;
};

}  // namespace fragscope::gui
