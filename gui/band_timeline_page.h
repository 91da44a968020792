#pragma once
// The Active Memory Timeline (every live allocation as a band over the run's events, memory_viz's
// main view) and the Segment timeline (every cudaMalloc segment, or mapped range of an expandable
// segment, from its allocation to its free): one page class, two kinds. The run's lifetimes are
// built once in a job (with progress and cancellation) when the page is first shown for a run;
// every zoom re-rasterises the visible range at screen resolution in another job, keeping each
// column's peak. Hover shows a band's size, life and stack; a click keeps its stack in the frames
// panel and moves the run's cursor there.
#include <QComboBox>
#include <QLabel>
#include <QTextBrowser>
#include <QTimer>
#include <QWidget>
#include <memory>
#include <optional>

#include "gui/job_tracker.h"
#include "gui/live_bands.h"
#include "gui/segment_map_page.h"
#include "storage/db/run_store.h"

class QCustomPlot;
class QCPItemPixmap;
class QCPItemStraightLine;
class QCPItemText;
class QCPGraph;

namespace fragscope::gui {

// What the page loads once per run.
struct BandData {
  storage::RunId run{};
  QString name;  // the run's name, as the Timeline's header and the runs list show it
  std::shared_ptr<const Lifetimes> lifetimes;
  std::shared_ptr<const FrameStacks> stacks;
  std::vector<std::uint64_t> oomEvents;
  std::optional<Bytes> limit;  // the per-process cap the run had, drawn as "X allowed"
};
// Reads the run's events in chunks, polling `job` (progress 0..1); throws Cancelled when it is
// superseded.
BandData loadBandData(const QString& databasePath, storage::RunId run, LifetimeKind kind,
                      const JobContext* job = nullptr);

class BandTimelinePage : public QWidget {
  Q_OBJECT
 public:
  enum class Colouring { category, stack, each, stream };

  explicit BandTimelinePage(LifetimeKind kind, QWidget* parent = nullptr);
  ~BandTimelinePage() override;

  void setDatabase(const QString& databasePath);
  void setRun(storage::RunId run);
  void clear();

  LifetimeKind kind() const { return m_kind; }
  bool busy() const { return m_loadJob.busy() || m_renderJob.busy() || m_rerender.isActive(); }
  const BandData& data() const { return m_data; }
  const BandRaster& raster() const { return m_raster; }
  QCustomPlot* plot() const { return m_plot; }
  QComboBox* colouring() const { return m_colouring; }
  QTextBrowser* framesPanel() const { return m_frames; }
  QLabel* header() const { return m_header; }
  // The run's per-process cap as a dashed line and its "X allowed" label (hidden without one).
  QCPItemStraightLine* capLine() const { return m_capLine; }
  QCPItemText* capLabel() const { return m_capLabel; }
  std::optional<std::size_t> selected() const { return m_selected; }
  // The band under a widget position of the plot, if any.
  std::optional<std::size_t> itemAtPlotPosition(const QPoint& position) const;
  // The tooltip text of one lifetime (size, life, category, stack).
  QString describe(std::size_t item, std::size_t maxFrames) const;
  // Selects a band (frames panel, highlight) as a click does.
  void select(std::optional<std::size_t> item);
  // Selects the band live at the cursor at address `addr`; 0 = the largest live band with a
  // recorded stack, else the largest. Before the run is loaded, once it is.
  void selectLive(std::uint64_t addr);
  // Shows cursor positions [first, end) (clamped to the run).
  void setRange(std::uint64_t first, std::uint64_t end);
  QColor colourOf(std::size_t item) const;
  // PNG or PDF by suffix.
  bool savePlot(const QString& path, QString* error) const;

 public slots:
  void setCursorEvent(std::uint64_t event);

 signals:
  void cursorEventChanged(std::uint64_t event);
  void dataReady();
  void rendered();
  void errorOccurred(const QString& message);

 protected:
  void showEvent(QShowEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void load();
  void showData(BandData data);
  void requestRender();
  void showRaster(BandRaster raster);
  void paintImage();
  void showTooltip(const QPoint& position);
  void updateHeader();

  LifetimeKind m_kind;
  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  bool m_loaded = false;
  BandData m_data;
  BandRaster m_raster;
  std::optional<std::size_t> m_selected;
  std::optional<std::uint64_t> m_pendingSelection;  // selectLive before the data loaded
  QLabel* m_header;
  QComboBox* m_colouring;
  QCustomPlot* m_plot;
  QCPItemPixmap* m_pixmap = nullptr;
  QCPGraph* m_total = nullptr;
  QCPItemStraightLine* m_cursorLine = nullptr;
  std::vector<QCPItemStraightLine*> m_oomLines;
  QCPItemStraightLine* m_capLine = nullptr;
  QCPItemText* m_capLabel = nullptr;
  QTextBrowser* m_frames;
  JobTracker m_loadJob{this};
  JobTracker m_renderJob{this};
  QTimer m_rerender;
  std::uint64_t m_cursor = 0;
  bool m_settingRange = false;
  QPoint m_pressPosition;
};

}  // namespace fragscope::gui
