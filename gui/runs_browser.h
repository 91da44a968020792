#pragma once
// The runs browser dock: every run of the open database in a sortable, filterable table
// (filter words match name, source, outcome and config; a combo picks the outcome). Selecting
// one run opens it; selecting several enables Compare. Rename edits in place, Delete asks
// first. The browser never touches the store itself: it asks through signals, and MainWindow
// (which owns the store) answers with setRuns().
#include <QComboBox>
#include <QLineEdit>
#include <QPushButton>
#include <QTableView>
#include <QWidget>
#include <vector>

#include "gui/runs_model.h"

namespace fragscope::gui {

class RunsBrowser : public QWidget {
  Q_OBJECT
 public:
  explicit RunsBrowser(QWidget* parent = nullptr);

  void setRuns(std::vector<storage::RunRecord> runs,
               std::map<storage::ExperimentId, storage::ExperimentProgress> experiments = {});
  std::vector<storage::RunId> selectedRuns() const;
  void selectRuns(const std::vector<storage::RunId>& runs);
  RunsModel* model() const { return m_model; }
  RunsFilterModel* filterModel() const { return m_filter; }
  QTableView* view() const { return m_view; }
  QLineEdit* filterEdit() const { return m_filterEdit; }
  // The Delete question, naming the runs (the first ten, then how many more).
  QString deleteQuestion(const std::vector<storage::RunId>& runs) const;

 signals:
  void runActivated(fragscope::storage::RunId run);
  void compareRequested(const std::vector<fragscope::storage::RunId>& runs);
  void deleteRequested(const std::vector<fragscope::storage::RunId>& runs);
  void renameRequested(fragscope::storage::RunId run, const QString& name);

 private:
  void onSelectionChanged();
  void confirmDelete();

  RunsModel* m_model;
  RunsFilterModel* m_filter;
  QTableView* m_view;
  QLineEdit* m_filterEdit;
  QComboBox* m_statusFilter;
  QPushButton* m_compareButton;
  QPushButton* m_deleteButton;
  QPushButton* m_renameButton;
};

}  // namespace fragscope::gui
