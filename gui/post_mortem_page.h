#pragma once
// OOM post-mortem: for a run that ran out of memory, why (engine/analysis's diagnosis: capacity,
// fragmentation, cache policy or another stream, with the figures that decided it) and what
// would have helped: the what-if table replays the run's request stream under the standard
// mitigations, ranked. Each row has a Run button that replays that mitigation and stores the
// result as a new simulated run, ready to compare with the original.
#include <QAbstractTableModel>
#include <QLabel>
#include <QTableView>
#include <QWidget>
#include <optional>
#include <vector>

#include "engine/analysis/post_mortem.h"
#include "engine/analysis/what_if.h"
#include "gui/job_tracker.h"
#include "gui/metatypes.h"
#include "storage/db/run_store.h"

namespace fragscope::gui {

struct PostMortemData {
  storage::RunRecord record;
  std::optional<Bytes> limit;  // the per-process limit the run had, when known
  std::vector<analysis::OomPostMortem> postMortems;
  std::optional<analysis::WhatIfTable> whatIf;
  QString whatIfError;
};

// Loads the run's events, diagnoses every OOM and (when there is one, or `alwaysWhatIf`) runs
// the what-if table. Runs in a job; checks `job` between the stages.
PostMortemData loadPostMortem(const QString& databasePath, storage::RunId run,
                              bool alwaysWhatIf = false, const JobContext* job = nullptr);
// Replays the run's requests under the named mitigation (a WhatIfRow's name) and stores the
// result as a simulated run; returns its id.
storage::RunId runMitigation(const QString& databasePath, storage::RunId run,
                             const std::string& mitigation, const JobContext* job = nullptr);

class WhatIfModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    RankColumn,
    NameColumn,
    OutcomeColumn,
    PeakReservedColumn,
    DeltaColumn,
    DeviceCallsColumn,
    IdealColumn,
    ActionColumn,
    ColumnCount
  };
  enum Role { SortRole = Qt::UserRole, NameRole };
  explicit WhatIfModel(QObject* parent = nullptr);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  void resetData(const analysis::WhatIfTable& table);
  void clearData();
  const analysis::WhatIfRow* rowAt(int row) const;

 private:
  analysis::WhatIfTable m_table;
};

class PostMortemPage : public QWidget {
  Q_OBJECT
 public:
  explicit PostMortemPage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath);
  void setRun(storage::RunId run);
  void clear();
  const std::optional<PostMortemData>& data() const { return m_data; }
  WhatIfModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  bool busy() const { return m_job.busy() || m_runJob.busy(); }
  // What the Run button of `row` does.
  void runRow(int row);

 signals:
  void dataReady();
  // A mitigation was replayed and stored as `created`; MainWindow refreshes and compares.
  void mitigationStored(fragscope::storage::RunId original, fragscope::storage::RunId created);
  void errorOccurred(const QString& message);

 private:
  void showData(PostMortemData data);

  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  std::optional<PostMortemData> m_data;
  QLabel* m_header;
  QLabel* m_evidence;
  WhatIfModel* m_model;
  QTableView* m_table;
  JobTracker m_job{this};
  JobTracker m_runJob{this};
};

}  // namespace fragscope::gui
