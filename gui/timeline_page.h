#pragma once
// Timeline: allocated, reserved and active bytes over the run's events, drawn from the store's
// peak-preserving buckets (a max line over a faint max-to-min band) and re-queried at screen
// resolution on every zoom, so a million-event run shows every peak at any zoom. Wheel zooms,
// drag pans, Shift+drag zooms to a rubber band, a click sets the cursor that drives the segment
// map; the ZoomStack keeps back/forward history. A labelled (simulated workload) run also shows
// its memory stacked by allocation category under the curves, toggled by "Categories".
#include <QCheckBox>
#include <QLabel>
#include <QString>
#include <QTimer>
#include <QWidget>
#include <array>
#include <optional>

#include "engine/core/frame.h"
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
  bool busy() const {
    return m_overviewJob.busy() || m_timelineJob.busy() || m_categoryJob.busy() ||
           m_requery.isActive() || m_categoryRequery.isActive();
  }

  // The category stack: the buckets on screen (empty, with labelled false, for a run without
  // labels), one graph per category holding the running sum from the bottom of the stack up to
  // that category, and the toggle (enabled only for a labelled run).
  const CategorySlice& categorySlice() const { return m_categorySlice; }
  // The stack's graphs in drawing order, bottom first; stackOrder()[i] is graph i's category.
  const std::array<QCPGraph*, storage::kCategoryCount>& categoryGraphs() const {
    return m_categoryGraphs;
  }
  static const std::array<Category, storage::kCategoryCount>& stackOrder();
  QCheckBox* categoriesToggle() const { return m_categoriesToggle; }
  // The cap line (empty data when the run had no per-process limit).
  QCPGraph* capGraph() const { return m_cap; }
  // The stack is drawn: the run has labels and the toggle is on.
  bool categoriesShown() const;

  // What hovering the plot at `position` shows: the bucket's figures and, once loaded, the
  // largest allocation made in it with its stack (empty outside the data).
  QString tooltipText(const QPoint& position);
  // The allocation the last hover found (its event index, the event, its stack); unset until a
  // hover's lookup finished.
  struct HoverAllocation {
    std::uint64_t firstEvent = 0;  // the bucket it was looked up for
    std::uint64_t endEvent = 0;
    std::optional<std::uint64_t> index;  // unset: no allocation in the bucket
    TraceEvent event;
    std::vector<Frame> frames;
  };
  const std::optional<HoverAllocation>& hoverAllocation() const { return m_hover; }
  bool hoverBusy() const { return m_hoverJob.busy(); }

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
  // Fresh category buckets (or the news that the run has none) for the current zoom.
  void categoriesReady();
  void errorOccurred(const QString& message);

 protected:
  void changeEvent(QEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  std::size_t bucketsOnScreen() const;
  void requestBuckets();
  void showSlice(TimelineSlice slice, bool replotNow = false);
  void requestCategories();
  void showCategories(CategorySlice slice);
  void updateCategoryVisibility();
  // What opening a run loads in one job: the overview and the first curves and category stack
  // over the whole run, so the plot is drawn before any other page starts its work.
  struct OpenedRun {
    RunOverview overview;
    TimelineSlice slice;
    CategorySlice categories;
  };
  void showOpenedRun(OpenedRun opened);
  void showOverview(RunOverview overview);
  void onRangeChanged(double lower, double upper);
  // Zooms the event axis to the pixels [left, right] of the plot (the Shift+drag band).
  void zoomToPixels(int left, int right);
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
  // The per-process limit (torch.cuda.set_per_process_memory_fraction) as a dashed line.
  QCPGraph* m_cap = nullptr;
  std::array<QCPGraph*, storage::kCategoryCount> m_categoryGraphs{};
  QCheckBox* m_categoriesToggle;
  CategorySlice m_categorySlice;
  // Unknown until the first category job answers; false stops further category queries.
  std::optional<bool> m_labelled;
  QCPItemStraightLine* m_cursorLine = nullptr;
  std::vector<QCPItemStraightLine*> m_oomLines;
  ZoomStack* m_zoom;
  // What the user waits on runs on its own pool (job_tracker.h: interactivePool).
  JobTracker m_overviewJob{this, interactivePool()};
  JobTracker m_timelineJob{this, interactivePool()};
  JobTracker m_categoryJob{this, interactivePool()};
  JobTracker m_hoverJob{this};
  std::optional<HoverAllocation> m_hover;
  QPoint m_hoverPosition;
  QTimer m_requery;
  std::size_t m_requestedBuckets = 0;  // of the last curves query: one per pixel of the axis
  // The category stack replays the run from event 0 (about 0.2-0.5 s on a 1.2M-event run) and a
  // superseded job still runs to its end, so it waits for the zoom to settle longer than the
  // curves do.
  QTimer m_categoryRequery;
  QTimer m_gestureEnd;
  std::uint64_t m_cursorEvent = 0;
  bool m_settingRange = false;
  QPoint m_pressPosition;
};

}  // namespace fragscope::gui
