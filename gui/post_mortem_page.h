#pragma once
// Post-mortem: for a run that ran out of memory, why (engine/analysis's diagnosis: capacity,
// fragmentation, cache policy or another stream, with the figures that decided it) and what to
// do; for a run without OOM, its fragmentation. The what-if table replays the run's request
// stream under the standard allocator settings (and, for a simulated experiment run, the
// workload changes), ranked honestly: only rows that avoid the failure get a rank. A setting's
// Run button replays it and stores the result as a new run; a workload change opens in the
// designer.
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
#include "gui/post_mortem_data.h"
#include "storage/db/run_store.h"

namespace fragscope::gui {

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
  // `hadOom`: the run failed, so "ok" means "avoids the OOM"; otherwise "fits".
  void resetData(const analysis::WhatIfTable& table, bool hadOom = true);
  void clearData();
  const analysis::WhatIfRow* rowAt(int row) const;

 private:
  analysis::WhatIfTable m_table;
  bool m_hadOom = true;
};

class PostMortemPage : public QWidget {
  Q_OBJECT
 public:
  explicit PostMortemPage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath);
  void setRun(storage::RunId run);
  // A trace that began mid-run: the automatic analysis may not replay it, and then says why
  // on the page instead of raising an error (set before setRun).
  void setStartsMidRun(bool midRun) { m_startsMidRun = midRun; }
  void clear();
  const std::optional<PostMortemData>& data() const { return m_data; }
  WhatIfModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  bool busy() const { return m_job.busy() || m_runJob.busy(); }
  // What the Run button of `row` does (an allocator setting: replay and store; a workload
  // change: open it in the designer).
  void runRow(int row);
  // The verdict paragraph above the table (what to do).
  QLabel* verdictLabel() const { return m_verdict; }
  QLabel* headerLabel() const { return m_header; }
  QLabel* evidenceLabel() const { return m_evidence; }

 signals:
  void dataReady();
  // A mitigation was replayed and stored as `created`; MainWindow refreshes and compares.
  void mitigationStored(fragscope::storage::RunId original, fragscope::storage::RunId created);
  // A workload change's experiment document (JSON), for the designer to open.
  void workloadChangeRequested(const QString& document);
  void errorOccurred(const QString& message);
  // The analysis that runs for every opened run failed: the page says why; quiet elsewhere.
  void analysisUnavailable(const QString& message);

 private:
  void showData(PostMortemData data);
  void showOom();
  void showNoOom();
  // The release whose rules the diagnosis and the rows followed, and the caveats (mid-run).
  QString replayNotes() const;
  QString verdictHtml() const;

  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  bool m_startsMidRun = false;
  std::optional<PostMortemData> m_data;
  QLabel* m_header;
  QLabel* m_evidence;
  QLabel* m_verdict;
  WhatIfModel* m_model;
  QTableView* m_table;
  JobTracker m_job{this};
  JobTracker m_runJob{this};
};

}  // namespace fragscope::gui
