#pragma once
// The runs of a database as a table: one row per run, sortable by every column (numbers sort
// as numbers through SortRole), filtered by RunsFilterModel. Filled with resetData() from a
// list loaded off the GUI thread.
#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <map>
#include <vector>

#include "gui/metatypes.h"
#include "storage/db/experiment_status.h"
#include "storage/db/run_store.h"

namespace fragscope::gui {

class RunsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // What a user looks for first comes first: name, outcome and peaks are visible at the dock's
  // default width; the provenance columns follow.
  enum Column {
    NameColumn,
    StatusColumn,
    PeakAllocatedColumn,
    PeakReservedColumn,
    EventsColumn,
    SourceColumn,
    ConfigColumn,
    DeviceColumn,
    CreatedColumn,
    ColumnCount
  };
  enum Role {
    SortRole = Qt::UserRole,
    RunIdRole,
    // Name, source, status and config joined, for the filter line.
    FilterTextRole,
    // The RunStatus name alone ("ok", "oom", ...), for the outcome filter.
    StatusRole,
  };

  explicit RunsModel(QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // Editing the name emits renameRequested; the store is changed by whoever owns it, and the
  // model follows with resetData() or updateName().
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

  // `experiments`: each experiment's progress (storage::experiment_progress); a run of an
  // incomplete experiment says so in its outcome, its tooltip and the filter text.
  void resetData(std::vector<storage::RunRecord> runs,
                 std::map<storage::ExperimentId, storage::ExperimentProgress> experiments = {});
  void clearData();
  void updateName(storage::RunId run, const QString& name);
  const storage::RunRecord* runAt(int row) const;
  int rowOf(storage::RunId run) const;
  const std::vector<storage::RunRecord>& runs() const { return m_runs; }
  // The progress of the experiment `run` belongs to, when that experiment is incomplete.
  const storage::ExperimentProgress* incompleteExperiment(const storage::RunRecord& run) const;

 signals:
  void renameRequested(storage::RunId run, const QString& name);

 private:
  // Names that more than one run has: those rows show "name · #id" so they can be told apart.
  void updateDuplicateNames();

  std::vector<storage::RunRecord> m_runs;
  std::vector<bool> m_sharedName;
  std::map<storage::ExperimentId, storage::ExperimentProgress> m_experiments;
};

// Case-insensitive substring filter over name, source, status and config (all words must
// match), plus an optional outcome filter.
class RunsFilterModel : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit RunsFilterModel(QObject* parent = nullptr);
  void setFilterWords(const QString& text);
  // Empty = any outcome; otherwise a RunStatus name ("ok", "oom", ...).
  void setStatusFilter(const QString& status);

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  QStringList m_words;
  QString m_status;
};

// Peak of one series from the run's summary JSON (finish_run's "peaks"), 0 when absent.
std::int64_t summaryPeak(const storage::RunRecord& run, const char* series);
// The run's trace starts mid-run (memory was in use before its first event; the import
// reconstructed that state): its figures miss what was allocated before.
bool runStartsMidRun(const storage::RunRecord& run);
// What the import found wrong or doubtful in the snapshot (an inconsistent trace stored with the
// series the trace alone gives, a trace that does not end in the final segments, ...), as stored
// in the run's summary: the header, the runs list and the report show them on the run.
QStringList runImportWarnings(const storage::RunRecord& run);
// "ok", "oom · mid-run", ...: the outcome as the list, the header and the report show it.
QString outcomeText(const storage::RunRecord& run);

}  // namespace fragscope::gui
