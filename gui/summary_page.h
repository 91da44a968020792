#pragma once
// Summary: the allocator state at the cursor as text (memory_summary()'s layout: one line per
// quantity, current values at the cursor and the run's peaks), plus the run's record —
// environment, config, and the memory_stats() PyTorch recorded when the run has them.
#include <QPlainTextEdit>
#include <QWidget>
#include <optional>

#include "gui/run_data.h"

namespace fragscope::gui {

// The text shown on the page; also used by the reports.
QString stateSummaryText(const storage::RunRecord& run, const SegmentSnapshotAt* state);

class SummaryPage : public QWidget {
  Q_OBJECT
 public:
  explicit SummaryPage(QWidget* parent = nullptr);
  void setRun(const storage::RunRecord& run);
  void setState(const SegmentSnapshotAt& state);
  void clear();
  QString text() const { return m_text->toPlainText(); }

 private:
  void refresh();
  std::optional<storage::RunRecord> m_run;
  std::optional<SegmentSnapshotAt> m_state;
  QPlainTextEdit* m_text;
};

}  // namespace fragscope::gui
