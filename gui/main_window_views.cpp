// The run views added beside the timeline and the segment map: the Active Memory Timeline, the
// Segment timeline and the Allocator State History, all following the run's one cursor.
#include <QSplitter>
#include <memory>

#include "gui/band_timeline_page.h"
#include "gui/event_history_page.h"
#include "gui/main_window.h"
#include "gui/segment_map_page.h"
#include "gui/timeline_page.h"

namespace fragscope::gui {

void MainWindow::createRunViews() {
  m_activeMemory = new BandTimelinePage(LifetimeKind::allocations, this);
  m_segmentTimeline = new BandTimelinePage(LifetimeKind::segments, this);
  m_history = new EventHistoryPage(this);
  // The state history sits beside the segment map, as in memory_viz.
  auto* mapRow = new QSplitter(Qt::Horizontal, m_runSplitter);
  mapRow->addWidget(m_segments);
  mapRow->addWidget(m_history);
  mapRow->setStretchFactor(0, 3);
  mapRow->setStretchFactor(1, 2);
  mapRow->setSizes({760, 460});
  m_runSplitter->addWidget(mapRow);

  connect(m_timeline, &TimelinePage::overviewReady, this, [this](const RunOverview& overview) {
    m_activeMemory->setRun(overview.record.id);
    m_segmentTimeline->setRun(overview.record.id);
    m_history->setRun(overview.record.id, overview.record.event_count, overview.oomEvents,
                      overview.peakCursor);
  });
  // One cursor: the timeline relays it to the segment map; every view follows and can move it.
  for (BandTimelinePage* page : {m_activeMemory, m_segmentTimeline}) {
    connect(m_timeline, &TimelinePage::cursorEventChanged, page, &BandTimelinePage::setCursorEvent);
    connect(page, &BandTimelinePage::cursorEventChanged, m_timeline, &TimelinePage::setCursorEvent);
  }
  connect(m_timeline, &TimelinePage::cursorEventChanged, m_history,
          &EventHistoryPage::setCursorEvent);
  connect(m_history, &EventHistoryPage::cursorEventChanged, m_timeline,
          &TimelinePage::setCursorEvent);
}

void MainWindow::showRunAt(storage::RunId run, std::optional<std::uint64_t> event,
                           std::optional<std::uint64_t> block) {
  // Queued: after the timeline has put the cursor at the OOM or the peak, and once only.
  auto once = std::make_shared<QMetaObject::Connection>();
  *once = connect(
      m_timeline, &TimelinePage::overviewReady, this,
      [this, run, event, block, once](const RunOverview& overview) {
        if (overview.record.id != run)
          return;
        disconnect(*once);
        if (event)
          m_timeline->setCursorEvent(*event);
        if (block) {
          m_segments->selectBlock(*block);
          m_activeMemory->selectLive(*block);
        }
      },
      Qt::QueuedConnection);
  showRun(run);
}

bool MainWindow::runViewsBusy() const {
  return m_activeMemory->busy() || m_segmentTimeline->busy() || m_history->busy();
}

bool MainWindow::showRunView(const QString& name) {
  if (name == QLatin1String("active-memory") || name == QLatin1String("allocations")) {
    showPage(Page::activeMemory);
  } else if (name == QLatin1String("segment-timeline") ||
             name == QLatin1String("segments-over-time")) {
    showPage(Page::segmentTimeline);
  } else if (name == QLatin1String("history") || name == QLatin1String("state-history")) {
    showPage(Page::run);
  } else {
    return false;
  }
  return true;
}

}  // namespace fragscope::gui
