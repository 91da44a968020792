// Stacks where `fragscope --run N --block largest --screenshot` shows them: a run opened at an
// event with a block selected shows that block's stack in the segment map's frames panel and on
// the Active Memory page once nothing is loading (what the screenshot waits for), "largest"
// prefers a block whose stack was recorded, and a block without one in a run with stacks says
// why (allocated off the Python thread) instead of telling the user to record stacks.
#include <QSignalSpy>
#include <QTest>

#include "gui/application.h"
#include "gui/band_timeline_page.h"
#include "gui/main_window.h"
#include "gui/segment_map_page.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"
#include "main_window_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {
constexpr std::uint64_t kSegment = 0x7f0000000000;
constexpr std::uint64_t kBig = kSegment;                  // 600 MiB, no stack (a backward buffer)
constexpr std::uint64_t kMiddle = kSegment + 600 * kMiB;  // 200 MiB, stack 1
constexpr std::uint64_t kSmall = kSegment + 800 * kMiB;   // 100 MiB, stack 2
}  // namespace

class TestStacks : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::RunId m_run;

  std::unique_ptr<MainWindow> openWindow() { return test::openMainWindow(m_db); }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("stacks.db"));
    storage::RunStore store(m_db.toStdString());
    // The largest block has no stack; two smaller ones do. Freed at the end, so the run's peak
    // (where it opens) is after the third allocation.
    const std::vector<TraceEvent> events{
        {TraceAction::segment_alloc, kSegment, 1024 * kMiB, StreamId{0}, 1, {}},
        {TraceAction::alloc, kBig, 600 * kMiB, StreamId{0}, 2, {}},
        {TraceAction::alloc, kMiddle, 200 * kMiB, StreamId{0}, 3, FrameStackId{1}},
        {TraceAction::alloc, kSmall, 100 * kMiB, StreamId{0}, 4, FrameStackId{2}},
        {TraceAction::free_requested, kSmall, 100 * kMiB, StreamId{0}, 5, {}},
        {TraceAction::free_completed, kSmall, 100 * kMiB, StreamId{0}, 6, {}},
        {TraceAction::free_requested, kMiddle, 200 * kMiB, StreamId{0}, 7, {}},
        {TraceAction::free_completed, kMiddle, 200 * kMiB, StreamId{0}, 8, {}},
    };
    storage::RunRecord record;
    record.name = "partly stacked";
    record.source = storage::RunSource::imported;
    const storage::RunId run = store.begin_run(record);
    const std::vector<std::vector<Frame>> stacks{
        {{"/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", 125, "forward"},
         {"/home/me/train.py", 40, "attention_scores"}},
        {{"/home/me/train.py", 77, "make_mask"}}};
    store.set_frame_stacks(run, stacks);
    store.append_events(run, events);
    m_run = store.finish_run(run, storage::RunStatus::ok).id;
  }

  // What `--run N --event 3 --block largest --page active-memory --screenshot` shows.
  void largestBlockWithAStackIsShownOnceNothingLoads() {
    auto window = openWindow();
    QVERIFY(window);
    window->showRunAt(m_run, 3, 0);
    window->showPage(MainWindow::Page::activeMemory);
    QVERIFY(test::waitFor([&] { return window->timelinePage()->overview() && !window->busy(); },
                          60000));
    // The segment map: the 200 MiB block (the 600 MiB one has no stack), at event 3.
    SegmentMapPage* segments = window->segmentMapPage();
    QCOMPARE(segments->eventIndex(), 3u);
    const Piece* selected = segments->mapWidget()->selectedPiece();
    QVERIFY(selected);
    QCOMPARE(selected->addr, kMiddle);
    const QString panel = segments->framesPanel()->toPlainText();
    QVERIFY2(panel.contains(QStringLiteral("attention_scores")), qPrintable(panel));
    // Installed code by its package path, the user's code by its whole path.
    QVERIFY2(panel.contains(QStringLiteral("torch/nn/modules/linear.py:125")), qPrintable(panel));
    QVERIFY(!panel.contains(QStringLiteral("site-packages")));
    QVERIFY(panel.contains(QStringLiteral("/home/me/train.py:40")));
    // The Active Memory page: the same allocation's band, its stack in the frames panel.
    BandTimelinePage* active = window->activeMemoryPage();
    QVERIFY(active->selected());
    QCOMPARE(active->data().lifetimes->items[*active->selected()].addr, kMiddle);
    const QString band = active->framesPanel()->toPlainText();
    QVERIFY2(band.contains(QStringLiteral("attention_scores")), qPrintable(band));
  }

  // "largest" is chosen in the state at the requested event, not in the one shown before the
  // cursor moved there (the peak, where the 200 MiB block with a stack lives): after two events
  // only the 600 MiB block without a stack lives, and the panel says why it has none.
  void largestIsChosenAtTheRequestedEvent() {
    auto window = openWindow();
    QVERIFY(window);
    window->showRunAt(m_run, 2, 0);
    QVERIFY(test::waitFor([&] { return window->timelinePage()->overview() && !window->busy(); },
                          60000));
    SegmentMapPage* segments = window->segmentMapPage();
    QCOMPARE(segments->eventIndex(), 2u);
    const Piece* selected = segments->mapWidget()->selectedPiece();
    QVERIFY(selected);
    QCOMPARE(selected->addr, kBig);
    const QString panel = segments->framesPanel()->toPlainText();
    QVERIFY2(panel.contains(QStringLiteral("outside Python code")), qPrintable(panel));
    // The same when the window already shows the peak's state and the cursor moves.
    window->timelinePage()->setCursorEvent(4);
    QVERIFY(test::waitFor([&] { return segments->eventIndex() == 4u && !window->busy(); }));
    segments->mapWidget()->selectAddress(kSmall);
    window->timelinePage()->setCursorEvent(2);
    segments->selectBlock(0);
    QVERIFY(test::waitFor([&] { return segments->eventIndex() == 2u && !window->busy(); }));
    QVERIFY(segments->mapWidget()->selectedPiece());
    QCOMPARE(segments->mapWidget()->selectedPiece()->addr, kBig);
    // A run without any stack says how to record them.
    QVERIFY(blockStackHtml(nullptr, FrameStackId{}, 12).contains(QStringLiteral("stacks=")));
    const FrameStacks none;
    QVERIFY(!blockStackHtml(&none, FrameStackId{}, 12).contains(QStringLiteral("outside Python")));
  }

  void blockByAddress() {
    auto window = openWindow();
    QVERIFY(window);
    window->showRunAt(m_run, 4, kSmall);
    QVERIFY(test::waitFor([&] { return window->timelinePage()->overview() && !window->busy(); },
                          60000));
    const Piece* selected = window->segmentMapPage()->mapWidget()->selectedPiece();
    QVERIFY(selected);
    QCOMPARE(selected->addr, kSmall);
    QVERIFY(window->segmentMapPage()->framesPanel()->toPlainText().contains(
        QStringLiteral("make_mask")));
  }

  // A simulated run has no Python stacks at all: its blocks say so, on the segment map, the
  // Active Memory page and the event list, instead of telling the user to record with
  // stacks="all" (which cannot help a run no Python code made).
  void simulatedRunSaysWhyItHasNoStacks() {
    storage::RunId run;
    {
      storage::RunStore store(m_db.toStdString());
      storage::RunRecord record;
      record.name = "simulated";
      record.source = storage::RunSource::simulated;
      const storage::RunId begun = store.begin_run(record);
      const std::vector<TraceEvent> events{
          {TraceAction::segment_alloc, kSegment, 1024 * kMiB, StreamId{0}, 0, {}},
          {TraceAction::alloc, kBig, 600 * kMiB, StreamId{0}, 0, {}}};
      store.append_events(begun, events);
      run = store.finish_run(begun, storage::RunStatus::ok).id;
    }
    auto window = openWindow();
    QVERIFY(window);
    window->showRunAt(run, 2, kBig);
    window->showPage(MainWindow::Page::activeMemory);
    QVERIFY(test::waitFor([&] { return window->timelinePage()->overview() && !window->busy(); },
                          60000));
    const QString panel = window->segmentMapPage()->framesPanel()->toPlainText();
    QVERIFY2(panel.contains(QStringLiteral("allocator model")), qPrintable(panel));
    QVERIFY2(!panel.contains(QStringLiteral("stacks=")), qPrintable(panel));
    BandTimelinePage* active = window->activeMemoryPage();
    QVERIFY(active->selected());
    const QString band = active->framesPanel()->toPlainText();
    QVERIFY2(band.contains(QStringLiteral("allocator model")), qPrintable(band));
    QVERIFY2(!band.contains(QStringLiteral("stacks=")), qPrintable(band));
    // The same words wherever a block's stack is asked for (the event list's tooltip).
    FrameStacks simulated;
    simulated.simulated = true;
    QCOMPARE(blockStackHtml(&simulated, FrameStackId{}, 16),
             blockStackHtml(active->data().stacks.get(), FrameStackId{}, 16));
  }
};

QTEST_MAIN(TestStacks)
#include "tst_stacks.moc"
