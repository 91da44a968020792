#pragma once
// Segment map: the allocator's segments at the cursor event, each byte the same area (see
// layoutSegments), blocks coloured by state, small/large/expandable pools told apart by the
// outline, streams by a stripe. Hover shows details, Left/Right step one event (PageUp/PageDown
// 100, Home/End the ends). At an OOM event the failed request is drawn against the largest
// free block, which is the whole story of fragmentation in one picture.
#include <QLabel>
#include <QScrollArea>
#include <QTextBrowser>
#include <QWidget>
#include <map>
#include <memory>
#include <optional>

#include "engine/core/frame.h"
#include "gui/job_tracker.h"
#include "gui/run_data.h"
#include "gui/segment_layout.h"

namespace fragscope::gui {

// A run's stacks: frames[i] is FrameStackId{i + 1}, as the store keeps them.
struct FrameStacks {
  std::vector<std::vector<Frame>> frames;
  // The run was computed by the allocator model (a simulated experiment, a what-if replay): no
  // Python code ran, so it has no stacks to have recorded.
  bool simulated = false;
  bool empty() const { return frames.empty(); }
};
// Every stack of a run, with whether it is simulated (read off the GUI thread).
FrameStacks loadFrameStacks(storage::RunStore& store, storage::RunId run);
// The frames of `id` (empty for none or unknown).
const std::vector<Frame>* stackOf(const FrameStacks* stacks, FrameStackId id);
// A recorded source path as the frames show it: the part after site-packages/ (or lib/pythonX/)
// for installed code, else the whole path.
QString shortSourcePath(const std::string& path);
// A stack as HTML lines "name  file:line", innermost first as PyTorch records it; at most
// `maxFrames` (then "… N more"), 0 = all.
QString stackHtml(const std::vector<Frame>& frames, std::size_t maxFrames);
// A block's stack for a tooltip or the frames panel, or why there is none.
QString blockStackHtml(const FrameStacks* stacks, FrameStackId id, std::size_t maxFrames);

class SegmentMapWidget : public QWidget {
  Q_OBJECT
 public:
  explicit SegmentMapWidget(QWidget* parent = nullptr);
  void setSnapshot(const SegmentSnapshotAt& snapshot);
  void clear();
  const std::vector<SegmentView>& views() const { return m_views; }
  const SegmentLayout& layoutForTest() const { return m_layout; }
  QSize sizeHint() const override { return {900, 500}; }
  // The piece under a widget position, or nullptr.
  const Piece* pieceAt(const QPointF& position, const SegmentView** segment = nullptr) const;
  // The stacks hover shows (loaded once per run, off the GUI thread); null until loaded.
  void setStacks(std::shared_ptr<const FrameStacks> stacks) { m_stacks = std::move(stacks); }
  const FrameStacks* stacks() const { return m_stacks.get(); }
  // The clicked piece (kept across events while the block at that address lives).
  const Piece* selectedPiece(const SegmentView** segment = nullptr) const;
  void selectAt(const QPointF& position);
  // Selects the live block at `addr` in the state shown (kept while it lives; found again when
  // the next state loads); 0 = the largest live block with a recorded stack, else the largest.
  void selectAddress(std::uint64_t addr);
  // The tooltip text for a piece.
  QString describePiece(const Piece& piece, const SegmentView& segment) const;

 signals:
  void stepRequested(std::int64_t delta);
  void jumpRequested(bool toEnd);
  void selectionChanged();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void relayout();
  QRectF mapArea() const;
  void findSelection();

  std::vector<SegmentView> m_views;
  std::vector<MempoolId> m_segmentPools;  // parallel to m_views; empty without private pools

  SegmentLayout m_layout;
  std::optional<TraceEvent> m_oom;  // the failed request when the next event is an OOM
  Bytes m_largestFree = 0;
  // What the banner says the OOM is: the post-mortem's classification when it is known.
  QString m_oomVerdict;
  std::shared_ptr<const FrameStacks> m_stacks;
  std::optional<std::uint64_t> m_selectedAddr;
  bool m_selectLargest = false;
  std::optional<std::pair<std::size_t, std::size_t>> m_selected;  // (segment, piece)

 public:
  void setOomVerdict(const QString& verdict) {
    m_oomVerdict = verdict;
    update();
  }
  QString oomBannerTitle() const;
};

class SegmentMapPage : public QWidget {
  Q_OBJECT
 public:
  explicit SegmentMapPage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath);
  void setRun(storage::RunId run, std::uint64_t eventCount);
  void clear();
  std::uint64_t eventIndex() const { return m_eventIndex; }
  const std::optional<SegmentSnapshotAt>& snapshot() const { return m_snapshot; }
  SegmentMapWidget* mapWidget() const { return m_map; }
  // The selected block's details and stack.
  QTextBrowser* framesPanel() const { return m_frames; }
  bool busy() const { return m_job.busy() || m_stackJob.busy(); }
  // Selects a block as SegmentMapWidget::selectAddress does, in the state being loaded when one
  // is (a cursor just moved), else in the state shown.
  void selectBlock(std::uint64_t addr);

 public slots:
  // The state after the first `eventIndex` events.
  void setEvent(std::uint64_t eventIndex);
  // Steps the cursor `delta` events (the arrow keys) and tells the timeline.
  void stepEvents(std::int64_t delta) { step(delta); }
  // To the run's first (false) or last (true) event.
  void jumpToEnd(bool toEnd);
  // The post-mortem's classification of each OOM event ("capacity", "fragmentation", ...), so
  // the banner says what the post-mortem says.
  void setOomCauses(std::map<std::uint64_t, std::string> causes);
  // The run's per-process limit, for the words on an OOM.
  void setMemoryLimit(std::optional<Bytes> limit) { m_limit = limit; }

 signals:
  // The user stepped with the keyboard; the timeline cursor follows.
  void eventChanged(std::uint64_t eventIndex);
  void snapshotReady(const fragscope::gui::SegmentSnapshotAt& snapshot);

 private:
  void showSnapshot(SegmentSnapshotAt snapshot);
  void step(std::int64_t delta);
  void updateFramesPanel();

  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  std::uint64_t m_eventCount = 0;
  std::uint64_t m_eventIndex = 0;
  std::optional<SegmentSnapshotAt> m_snapshot;
  QLabel* m_header;
  QLabel* m_legend;
  SegmentMapWidget* m_map;
  QTextBrowser* m_frames;
  std::map<std::uint64_t, std::string> m_oomCauses;
  std::optional<Bytes> m_limit;
  std::optional<std::uint64_t> m_pendingSelection;
  // The map at the cursor is what the user waits on, like the timeline: it never queues behind
  // the Summary's keyframes or the post-mortem on the global pool.
  JobTracker m_job{this, interactivePool()};
  JobTracker m_stackJob{this};
};

QColor pieceColor(PieceKind kind);
// The four piece kinds as colour swatches with their names (rich text), for the map's legend
// and the report's.
QString pieceLegendHtml();
// One event in words; an OOM names the per-process `limit` when the run had one (PyTorch's
// "X allowed"), else the device's free memory the trace recorded.
QString describeEvent(const TraceEvent& event, std::optional<Bytes> limit = std::nullopt);

}  // namespace fragscope::gui
