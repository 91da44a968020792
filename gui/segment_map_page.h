#pragma once
// Segment map: the allocator's segments at the cursor event, each byte the same area (see
// layoutSegments), blocks coloured by state, small/large/expandable pools told apart by the
// outline, streams by a stripe. Hover shows details, Left/Right step one event (PageUp/PageDown
// 100, Home/End the ends). At an OOM event the failed request is drawn against the largest
// free block, which is the whole story of fragmentation in one picture.
#include <QLabel>
#include <QScrollArea>
#include <QWidget>
#include <optional>

#include "gui/job_tracker.h"
#include "gui/run_data.h"
#include "gui/segment_layout.h"

namespace fragscope::gui {

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

 signals:
  void stepRequested(std::int64_t delta);
  void jumpRequested(bool toEnd);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void relayout();
  QRectF mapArea() const;

  std::vector<SegmentView> m_views;
  SegmentLayout m_layout;
  std::optional<TraceEvent> m_oom;  // the failed request when the next event is an OOM
  Bytes m_largestFree = 0;
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
  bool busy() const { return m_job.busy(); }

 public slots:
  // The state after the first `eventIndex` events.
  void setEvent(std::uint64_t eventIndex);

 signals:
  // The user stepped with the keyboard; the timeline cursor follows.
  void eventChanged(std::uint64_t eventIndex);
  void snapshotReady(const fragscope::gui::SegmentSnapshotAt& snapshot);

 private:
  void showSnapshot(SegmentSnapshotAt snapshot);
  void step(std::int64_t delta);

  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  std::uint64_t m_eventCount = 0;
  std::uint64_t m_eventIndex = 0;
  std::optional<SegmentSnapshotAt> m_snapshot;
  QLabel* m_header;
  QLabel* m_legend;
  SegmentMapWidget* m_map;
  JobTracker m_job{this};
};

QColor pieceColor(PieceKind kind);
QString describeEvent(const TraceEvent& event);

}  // namespace fragscope::gui
