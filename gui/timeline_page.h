#pragma once
// Timeline: allocated, reserved and active bytes over the run's events, drawn from the store's
// peak-preserving buckets (a max line over a faint max-to-min band) and re-queried at screen
// resolution on every zoom, so a million-event run shows every peak at any zoom. Wheel zooms,
// drag pans, Shift+drag zooms to a rubber band, a click sets the cursor that drives the segment
// map; the ZoomStack keeps back/forward history.
#include <QLabel>
#include <QString>
#include <QTimer>
#include <QWidget>
#include <optional>

#include "gui/job_tracker.h"
#include "gui/run_data.h"
#include "gui/zoom_stack.h"

class QCustomPlot;
class QCPItemStraightLine;
class QCPGraph;

namespace fragscope::gui {

class TimelinePage : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePage(QWidget* parent = nullptr);
  ~TimelinePage() override;

  void setDatabase(const QString& databasePath);
  void setRun(storage::RunId run);
  void clear();
  std::optional<storage::RunId> run() const { return m_run; }
  const RunOverview* overview() const { return m_overview ? &*m_overview : nullptr; }
  const TimelineSlice& slice() const { return m_slice; }

  ZoomStack* zoomStack() const { return m_zoom; }
  QCustomPlot* plot() const { return m_plot; }
  std::uint64_t cursorEvent() const { return m_cursorEvent; }
  bool busy() const { return m_overviewJob.busy() || m_timelineJob.busy() || m_requery.isActive(); }

  // The buckets on screen as CSV (one row per bucket, max and min of each series).
  QString timelineCsv() const;
  // PNG, SVG or PDF by the file's suffix; false (with `error`) when it could not be written.
  bool savePlot(const QString& path, QString* error) const;

 public slots:
  void setCursorEvent(std::uint64_t event);

 signals:
  void cursorEventChanged(std::uint64_t event);
  void overviewReady(const fragscope::gui::RunOverview& overview);
  // Fresh buckets are on screen for the current zoom.
  void dataReady();
  void errorOccurred(const QString& message);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void requestBuckets();
  void showSlice(TimelineSlice slice);
  void showOverview(RunOverview overview);
  void onRangeChanged(double lower, double upper);
  void updateOomMarkers();
  void showTooltip(const QPoint& position);

  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  std::optional<RunOverview> m_overview;
  TimelineSlice m_slice;
  QCustomPlot* m_plot;
  QLabel* m_header;
  QCPGraph* m_allocated = nullptr;
  QCPGraph* m_reserved = nullptr;
  QCPGraph* m_active = nullptr;
  QCPItemStraightLine* m_cursorLine = nullptr;
  std::vector<QCPItemStraightLine*> m_oomLines;
  ZoomStack* m_zoom;
  JobTracker m_overviewJob{this};
  JobTracker m_timelineJob{this};
  QTimer m_requery;
  QTimer m_gestureEnd;
  std::uint64_t m_cursorEvent = 0;
  bool m_settingRange = false;
  bool m_rubberBand = false;
  QPoint m_pressPosition;
};

}  // namespace fragscope::gui
