// The Active Memory Timeline, the Segment timeline and the Allocator State History: the lifetimes
// they draw, the peak-preserving raster, the find bar's queries, and the pages linked to the
// run's cursor in the main window.
#include <QSignalSpy>
#include <QTest>

#include "gui/band_timeline_page.h"
#include "gui/event_history_page.h"
#include "gui/live_bands.h"
#include "gui/main_window.h"
#include "gui/plot_style.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {
TraceEvent ev(TraceAction action, std::uint64_t addr, Bytes size, std::uint32_t frames = 0) {
  return {action, addr, size, StreamId{0}, 0, FrameStackId{frames}};
}
}  // namespace

class TestRunViews : public QObject {
  Q_OBJECT
 private slots:
  void allocationLifetimesFollowAllocAndFreeCompleted() {
    storage::SegmentMap initial;
    initial.add_segment({0x1000, 8 * kMiB, StreamId{0}, false});
    initial.add_block({0x1000, 1 * kMiB, StreamId{0}, BlockState::active_allocated, {}});
    LifetimeBuilder builder(LifetimeKind::allocations, initial);
    const std::vector<TraceEvent> events{
        ev(TraceAction::alloc, 0x200000, 2 * kMiB, 7),        // 0
        ev(TraceAction::alloc, 0x400000, 3 * kMiB),           // 1
        ev(TraceAction::free_requested, 0x200000, 2 * kMiB),  // 2: still live until completed
        ev(TraceAction::free_completed, 0x200000, 2 * kMiB),  // 3
        ev(TraceAction::oom, 0, 64 * kMiB),                   // 4
    };
    const std::vector<Category> categories{Category::activation, Category::parameter,
                                           Category::unknown, Category::unknown, Category::unknown};
    builder.add(events, categories);
    const Lifetimes lifetimes = std::move(builder).finish();
    QCOMPARE(lifetimes.eventCount, std::uint64_t{5});
    QCOMPARE(lifetimes.items.size(), std::size_t{3});
    QVERIFY(lifetimes.items[0].beforeTrace());
    QVERIFY(lifetimes.items[0].neverFreed(5));
    QCOMPARE(lifetimes.items[1].begin, std::uint64_t{1});
    QCOMPARE(lifetimes.items[1].end, std::uint64_t{4});  // freed at event 3: gone from cursor 4
    QCOMPARE(lifetimes.items[1].frames.value, FrameStackId{7}.value);
    QCOMPARE(lifetimes.items[1].category, Category::activation);
    QCOMPARE(lifetimes.items[2].category, Category::parameter);
    QVERIFY(lifetimes.labelled);
    QVERIFY(lifetimes.hasStacks);
    const std::vector<std::int64_t> totals{1 * kMiB, 3 * kMiB, 6 * kMiB,
                                           6 * kMiB, 4 * kMiB, 4 * kMiB};
    QCOMPARE(lifetimes.totals, totals);
  }

  void segmentLifetimesSplitOnPartialUnmap() {
    LifetimeBuilder builder(LifetimeKind::segments, {});
    const std::vector<TraceEvent> events{
        ev(TraceAction::segment_alloc, 0x10000000, 20 * kMiB),
        ev(TraceAction::alloc, 0x10000000, 1 * kMiB),  // blocks are not segments
        ev(TraceAction::segment_map, 0x20000000, 8 * kMiB),
        ev(TraceAction::segment_unmap, 0x20000000 + 2 * kMiB, 2 * kMiB),
        ev(TraceAction::segment_free, 0x10000000, 20 * kMiB),
    };
    builder.add(events);
    const Lifetimes lifetimes = std::move(builder).finish();
    QCOMPARE(lifetimes.items.size(),
             std::size_t{4});  // segment, mapped range, and its two remainders
    QCOMPARE(lifetimes.items[0].end, std::uint64_t{5});
    QCOMPARE(lifetimes.items[1].end, std::uint64_t{4});
    QVERIFY(lifetimes.items[1].expandable);
    QCOMPARE(lifetimes.items[2].size, 2 * kMiB);
    QCOMPARE(lifetimes.items[3].size, 4 * kMiB);
    QCOMPARE(lifetimes.items[3].addr, std::uint64_t{0x20000000 + 4 * kMiB});
    QCOMPARE(lifetimes.totals.back(), 6 * kMiB);
    QCOMPARE(lifetimes.totals[3], 28 * kMiB);
  }

  void rasterKeepsAOneEventPeakAtAnyZoom() {
    // A long flat run of small churn with one huge allocation that lives for a single event.
    LifetimeBuilder builder(LifetimeKind::allocations, {});
    std::vector<TraceEvent> events;
    events.push_back(ev(TraceAction::alloc, 0x1000, 10 * kMiB));
    for (int i = 0; i < 50'000; ++i) {
      events.push_back(ev(TraceAction::alloc, 0x100000000 + 0x1000, 1 * kMiB));
      if (i == 31'337)
        events.push_back(ev(TraceAction::alloc, 0x900000000, 500 * kMiB));
      events.push_back(ev(TraceAction::free_completed, 0x100000000 + 0x1000, 1 * kMiB));
      if (i == 31'337)
        events.push_back(ev(TraceAction::free_completed, 0x900000000, 500 * kMiB));
    }
    builder.add(events);
    const Lifetimes lifetimes = std::move(builder).finish();
    const std::size_t spike = 1 + 31'337 + 1;  // the 10 MiB, the churn up to it, then the spike
    QCOMPARE(lifetimes.items[spike].size, 500 * kMiB);
    const std::int64_t peak = peakTotal(lifetimes, 0, lifetimes.totals.size());
    QCOMPARE(peak, 511 * kMiB);
    for (const int width : {37, 400}) {
      const BandRaster raster = renderBands(lifetimes, 0, lifetimes.totals.size(), width, 100);
      QCOMPARE(raster.maxBytes, peak);
      bool seen = false;
      for (int x = 0; x < width; ++x)
        seen = seen || raster.itemAt(x, 0) == spike;
      QVERIFY2(seen, "the one-event spike reaches the top row at this width");
      // The bottom row is the oldest live allocation everywhere (stacking order).
      for (int x = 0; x < width; ++x)
        QCOMPARE(raster.itemAt(x, 99), std::optional<std::size_t>(0));
    }
    // Zoomed away from the spike the top of the range is the 10 + 1 MiB level.
    const BandRaster calm = renderBands(lifetimes, 0, 1000, 50, 110);
    QCOMPARE(calm.maxBytes, 11 * kMiB);
    QVERIFY(!calm.itemAt(0, 0) || calm.itemAt(0, 0) != spike);
  }

  void findQueriesParse() {
    auto query = parseEventQuery(QStringLiteral(" #1234 "));
    QVERIFY(query && std::get<std::uint64_t>(*query) == 1234);
    query = parseEventQuery(QStringLiteral("> 1 MiB"));
    QVERIFY(query);
    auto size = std::get<SizeQuery>(*query);
    QCOMPARE(size.bytes, kMiB + 1);
    QVERIFY(size.compare == SizeQuery::Compare::at_least);
    size = std::get<SizeQuery>(*parseEventQuery(QStringLiteral("<=512kib")));
    QCOMPARE(size.bytes, 512 * kKiB);
    QVERIFY(size.compare == SizeQuery::Compare::at_most);
    size = std::get<SizeQuery>(*parseEventQuery(QStringLiteral("= 2097152")));
    QCOMPARE(size.bytes, 2 * kMiB);
    QVERIFY(size.compare == SizeQuery::Compare::equal);
    size = std::get<SizeQuery>(*parseEventQuery(QStringLiteral("1.5 GiB")));
    QCOMPARE(size.bytes, 3 * kGiB / 2);
    QCOMPARE(std::get<FrameQuery>(*parseEventQuery(QStringLiteral("forward"))).text,
             QStringLiteral("forward"));
    QVERIFY(!parseEventQuery(QStringLiteral("   ")));
  }

  void findEventScansBothWays() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("find.db"));
    const auto events = test::wavyTrace(150'000, 5, true);
    storage::RunId run;
    {
      storage::RunStore store(db.toStdString());
      run = test::addRun(store, "find", events);
    }
    const SizeQuery big{SizeQuery::Compare::at_least, 4 * kMiB - 64 * kKiB};
    std::optional<std::uint64_t> expectedForward;
    std::optional<std::uint64_t> expectedBackward;
    for (std::uint64_t i = 0; i < events.size(); ++i) {
      if (events[i].action != TraceAction::alloc || events[i].size < big.bytes)
        continue;
      if (!expectedForward && i >= 70'000)
        expectedForward = i;
      if (i <= 140'000)
        expectedBackward = i;
    }
    QVERIFY(expectedForward && expectedBackward);
    QCOMPARE(findEvent(db, run, big, 70'000, +1, nullptr), expectedForward);
    QCOMPARE(findEvent(db, run, big, 140'000, -1, nullptr), expectedBackward);
    const SizeQuery none{SizeQuery::Compare::at_least, 100 * kGiB};
    QVERIFY(!findEvent(db, run, none, 0, +1, nullptr));
  }

  void pagesFollowTheRunsCursor() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("views.db"));
    const auto events = test::wavyTrace(40'000, 3, true);
    storage::RunId run;
    {
      storage::RunStore store(db.toStdString());
      run = test::addRun(store, "views", events, {}, storage::RunStatus::oom);
    }
    MainWindow window;
    window.resize(1400, 900);
    QVERIFY(window.openDatabase(db));
    window.show();
    window.showRun(run);
    QVERIFY(test::waitFor([&] { return window.timelinePage()->overview() && !window.busy(); }));

    // The history selects the OOM the timeline opens at, and moves the cursor when clicked.
    EventHistoryPage* history = window.historyPage();
    QCOMPARE(history->model()->rowCount(), static_cast<int>(events.size()));
    QCOMPARE(history->view()->currentIndex().row(), static_cast<int>(events.size() - 1));
    QCOMPARE(history->model()
                 ->data(history->model()->index(static_cast<int>(events.size() - 1),
                                                EventListModel::ActionColumn),
                        Qt::DisplayRole)
                 .toString(),
             QStringLiteral("oom"));
    history->goToEvent(1000);
    QCOMPARE(window.timelinePage()->cursorEvent(), std::uint64_t{1001});
    history->nextOom(+1);
    QCOMPARE(window.timelinePage()->cursorEvent(), std::uint64_t{events.size() - 1});
    history->findField()->setText(QStringLiteral("12"));
    history->find(+1);
    QCOMPARE(window.timelinePage()->cursorEvent(), std::uint64_t{13});

    // The Active Memory Timeline loads when shown, and its drawn total is the run's live bytes.
    window.showPage(MainWindow::Page::activeMemory);
    BandTimelinePage* active = window.activeMemoryPage();
    QVERIFY(test::waitFor([&] { return active->raster().width > 0 && !active->busy(); }));
    const Lifetimes& lifetimes = *active->data().lifetimes;
    std::int64_t live = 0;
    std::int64_t peak = 0;
    for (const TraceEvent& event : events) {
      if (event.action == TraceAction::alloc)
        live += event.size;
      else if (event.action == TraceAction::free_completed)
        live -= event.size;
      peak = std::max(peak, live);
    }
    QCOMPARE(lifetimes.totals.back(), live);
    QCOMPARE(peakTotal(lifetimes, 0, lifetimes.totals.size()), peak);
    // Hover finds the band under the mouse; a click keeps its description in the frames panel
    // and moves the run's cursor.
    QCustomPlot* plot = active->plot();
    const QRect rect = plot->axisRect()->rect();
    const QPoint low(rect.left() + rect.width() / 2, rect.bottom() - 2);
    const auto item = active->itemAtPlotPosition(low);
    QVERIFY(item.has_value());
    QTest::mouseClick(plot, Qt::LeftButton, Qt::NoModifier, low);
    QCOMPARE(active->selected(), item);
    QVERIFY(active->framesPanel()->toPlainText().contains(QStringLiteral("Allocated: event")));
    const auto clicked = window.timelinePage()->cursorEvent();
    QVERIFY(clicked > 0 && clicked < events.size());

    window.showPage(MainWindow::Page::segmentTimeline);
    BandTimelinePage* segments = window.segmentTimelinePage();
    QVERIFY(test::waitFor([&] { return segments->raster().width > 0 && !segments->busy(); }));
    const auto segmentCount = static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(),
                      [](const TraceEvent& e) { return e.action == TraceAction::segment_alloc; }));
    QCOMPARE(segments->data().lifetimes->items.size(), segmentCount);
    QCOMPARE(segments->data().lifetimes->totals.back(),
             static_cast<std::int64_t>(segmentCount) * 20 * kMiB);
  }

  // Hovering the curves timeline shows the largest allocation made under the mouse with its
  // stack, looked up off the GUI thread for that bucket.
  void curvesTimelineShowsTheAllocationsStackOnHover() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("hover.db"));
    auto events = test::wavyTrace(20'000, 5, false);
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i].action == TraceAction::alloc)
        events[i].frames = FrameStackId{static_cast<std::uint32_t>(1 + i % 2)};
    storage::RunId run;
    {
      storage::RunStore store(db.toStdString());
      storage::RunRecord record;
      record.name = "hover";
      record.source = storage::RunSource::simulated;
      record.capacity = 140 * kGiB;
      run = store.begin_run(record);
      const std::vector<std::vector<Frame>> stacks{
          {{"model.py", 41, "attention_forward"}, {"train.py", 7, "step"}},
          {{"model.py", 88, "mlp_forward"}, {"train.py", 7, "step"}}};
      store.set_frame_stacks(run, stacks);
      store.append_events(run, events);
      store.finish_run(run, storage::RunStatus::ok);
    }
    TimelinePage page;
    page.resize(1200, 500);
    page.setDatabase(db);
    page.show();
    page.setRun(run);
    QVERIFY(test::waitFor(
        [&] { return page.overview() && !page.busy() && !page.slice().buckets.empty(); }));
    const QRect rect = page.plot()->axisRect()->rect();
    const QPoint middle(rect.left() + rect.width() / 2, rect.center().y());
    QVERIFY(!page.tooltipText(middle).isEmpty());
    QVERIFY(test::waitFor([&] { return !page.hoverBusy() && page.hoverAllocation(); }));
    const auto& hover = *page.hoverAllocation();
    QVERIFY(hover.index);
    // The largest allocation of the bucket's events, and its stack.
    std::uint64_t largest = hover.firstEvent;
    Bytes size = 0;
    for (std::uint64_t i = hover.firstEvent; i < hover.endEvent; ++i)
      if (events[i].action == TraceAction::alloc && events[i].size > size) {
        size = events[i].size;
        largest = i;
      }
    QCOMPARE(*hover.index, largest);
    const QString expected = events[largest].frames.value == 1 ? QStringLiteral("attention_forward")
                                                               : QStringLiteral("mlp_forward");
    const QString text = page.tooltipText(middle);
    QVERIFY2(text.contains(expected), qPrintable(text));
    QVERIFY(text.contains(QStringLiteral("largest allocation here")));
  }
};

QTEST_MAIN(TestRunViews)
#include "tst_run_views.moc"
