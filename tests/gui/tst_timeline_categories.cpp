// The timeline's category stack, offscreen: a labelled run shows one stacked band per category
// whose running sums are the store's category_timeline for the range on screen (re-queried on
// zoom); an unlabelled run shows no stack and offers no toggle. The Active Memory page's bands take
// the same category colours, and a mid-run trace is marked in the Timeline's header.
#include <QSignalSpy>
#include <QTest>

#include <map>

#include "gui/application.h"
#include "gui/band_timeline_page.h"
#include "gui/format.h"
#include "gui/live_bands.h"
#include "gui/plot_style.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {

// Categories given to allocations in turn, so every one of them appears in the run.
constexpr std::array<Category, 5> kCycle{Category::parameter, Category::gradient,
                                         Category::optimizer_state, Category::activation,
                                         Category::temporary};

// Stores `events` with a label table of one entry per category in kCycle (LabelId{0} is the
// unlabelled entry) and labels allocations in turn; every eleventh stays unlabelled.
storage::RunId addLabelledRun(storage::RunStore& store, const std::string& name,
                              const std::vector<TraceEvent>& events) {
  storage::RunRecord record;
  record.name = name;
  record.source = storage::RunSource::simulated;
  record.device_name = "NVIDIA H200";
  record.capacity = 140 * kGiB;
  const storage::RunId run = store.begin_run(record);
  std::vector<RequestLabel> labels{RequestLabel{}};
  for (const Category category : kCycle)
    labels.push_back({category, std::string(to_string(category)), -1});
  store.set_labels(run, labels);
  std::vector<LabelId> eventLabels(events.size(), LabelId{0});
  std::uint32_t allocations = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action != TraceAction::alloc)
      continue;
    ++allocations;
    if (allocations % 11 != 0)
      eventLabels[i] = LabelId{1 + allocations % static_cast<std::uint32_t>(kCycle.size())};
  }
  store.append_events(run, events, storage::EventColumns{{}, eventLabels});
  return store.finish_run(run, storage::RunStatus::ok).id;
}

}  // namespace

class TestTimelineCategories : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::RunId m_labelled, m_unlabelled, m_stacked, m_midRun;

  // Waits until the page has the category answer for its current zoom and nothing is loading.
  static bool waitForCategories(TimelinePage& page, QSignalSpy& spy) {
    return test::waitFor([&] { return spy.count() > 0 && !page.busy(); });
  }

  // The page's stack against the store's category_timeline for the same range and bucket count.
  static void compareStackWithStore(const TimelinePage& page, const QString& db,
                                    storage::RunId run) {
    const CategorySlice& slice = page.categorySlice();
    QVERIFY(!slice.buckets.empty());
    storage::RunStore store(db.toStdString(), storage::OpenMode::read_only);
    const auto expected =
        store.category_timeline(run, slice.first, slice.end, slice.buckets.size());
    QCOMPARE(expected.size(), slice.buckets.size());
    const auto& graphs = page.categoryGraphs();
    const auto& order = TimelinePage::stackOrder();
    std::size_t nonEmpty = 0;
    for (std::size_t b = 0; b < expected.size(); ++b) {
      QCOMPARE(slice.buckets[b].first_event, expected[b].first_event);
      QCOMPARE(slice.buckets[b].end_event, expected[b].end_event);
      double runningSum = 0;
      for (std::size_t i = 0; i < order.size(); ++i) {
        runningSum += static_cast<double>(expected[b].bytes[static_cast<std::size_t>(order[i])]);
        const auto point = graphs[i]->data()->at(static_cast<int>(b));
        QCOMPARE(point->key, static_cast<double>(expected[b].first_event));
        QCOMPARE(point->value, runningSum);
      }
      // The top of the stack is the sum over every category.
      double sum = 0;
      for (const std::int64_t bytes : expected[b].bytes)
        sum += static_cast<double>(bytes);
      QCOMPARE(graphs.back()->data()->at(static_cast<int>(b))->value, sum);
      QCOMPARE(sum, static_cast<double>(expected[b].total()));
      if (sum > 0)
        ++nonEmpty;
    }
    QVERIFY(nonEmpty > expected.size() / 2);
  }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.db"));
    storage::RunStore store(m_db.toStdString());
    m_labelled = addLabelledRun(store, "labelled", test::wavyTrace(30000, 7, false));
    m_unlabelled = test::addRun(store, "imported", test::wavyTrace(20000, 8, false));
    // Two stacks, given to allocations in turn.
    std::vector<TraceEvent> events = test::wavyTrace(4000, 9, false);
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i].action == TraceAction::alloc)
        events[i].frames = FrameStackId{static_cast<std::uint32_t>(1 + i % 2)};
    storage::RunRecord record;
    record.name = "stacked";
    record.source = storage::RunSource::imported;
    const storage::RunId stacked = store.begin_run(record);
    const std::vector<std::vector<Frame>> stacks{{{"model.py", 42, "forward"}},
                                                 {{"optim.py", 9, "step"}}};
    store.set_frame_stacks(stacked, stacks);
    store.append_events(stacked, events);
    m_stacked = store.finish_run(stacked, storage::RunStatus::ok).id;
    m_midRun = test::addRun(store, "tail", test::wavyTrace(3000, 10, false));
    nlohmann::json summary = store.run(m_midRun).summary;
    summary["truncated"] = true;
    store.update_summary(m_midRun, summary);
  }

  void labelledRunShowsTheStoresCategoryStack() {
    TimelinePage page;
    page.resize(1000, 500);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &TimelinePage::categoriesReady);
    page.setRun(m_labelled);
    QVERIFY(waitForCategories(page, ready));
    QVERIFY(page.categorySlice().labelled);
    QVERIFY(page.categoriesShown());
    QVERIFY(page.categoriesToggle()->isEnabled());
    QCOMPARE(page.categorySlice().first, std::uint64_t{0});
    QCOMPARE(page.categorySlice().end, std::uint64_t{30000});
    // Every category has its band, drawn under the memory curves; the legend names those the
    // run holds (every labelled one, and "unknown" for the unlabelled allocations) and no other.
    for (std::size_t i = 0; i < page.categoryGraphs().size(); ++i) {
      QCPGraph* graph = page.categoryGraphs()[i];
      const Category category = TimelinePage::stackOrder()[i];
      const bool held = category == Category::unknown ||
                        std::find(kCycle.begin(), kCycle.end(), category) != kCycle.end();
      QVERIFY(graph->visible());
      QCOMPARE(page.plot()->legend->hasItemWithPlottable(graph), held);
      QCOMPARE(graph->layer()->name(), QStringLiteral("categories"));
      QCOMPARE(graph->data()->size(), static_cast<int>(page.categorySlice().buckets.size() + 1));
    }
    QVERIFY(page.plot()->layer(QStringLiteral("categories"))->index() <
            page.plot()->layer(QStringLiteral("main"))->index());
    compareStackWithStore(page, m_db, m_labelled);
    // The labelled categories really are in the run: not everything landed in "unknown".
    const auto& buckets = page.categorySlice().buckets;
    const auto& middle = buckets[buckets.size() / 2];
    for (const Category category : kCycle)
      QVERIFY2(middle.bytes[static_cast<std::size_t>(category)] > 0, to_string(category).data());

    // A zoom re-queries the stack for the new range.
    ready.clear();
    page.zoomStack()->zoomTo({10000, 12000});
    QVERIFY(waitForCategories(page, ready));
    QCOMPARE(page.categorySlice().first, std::uint64_t{10000});
    QCOMPARE(page.categorySlice().end, std::uint64_t{12000});
    compareStackWithStore(page, m_db, m_labelled);

    // Zooms in quick succession: the newest range is what the stack shows.
    ready.clear();
    page.zoomStack()->zoomTo({2000, 9000});
    QTest::qWait(5);
    page.zoomStack()->zoomTo({20000, 29000});
    QVERIFY(waitForCategories(page, ready));
    QCOMPARE(page.categorySlice().first, std::uint64_t{20000});
    QCOMPARE(page.categorySlice().end, std::uint64_t{29000});
    compareStackWithStore(page, m_db, m_labelled);

    // The toggle hides the stack and its legend entries.
    page.categoriesToggle()->setChecked(false);
    QVERIFY(!page.categoriesShown());
    for (QCPGraph* graph : page.categoryGraphs()) {
      QVERIFY(!graph->visible());
      QVERIFY(!page.plot()->legend->hasItemWithPlottable(graph));
    }
    page.categoriesToggle()->setChecked(true);
    QVERIFY(page.categoriesShown());
  }

  void unlabelledRunHasNoStack() {
    TimelinePage page;
    page.resize(1000, 500);
    page.show();
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &TimelinePage::categoriesReady);
    QSignalSpy data(&page, &TimelinePage::dataReady);
    page.setRun(m_unlabelled);
    QVERIFY(waitForCategories(page, ready));
    QVERIFY(data.count() > 0);
    QVERIFY(!page.categorySlice().labelled);
    QVERIFY(page.categorySlice().buckets.empty());
    QVERIFY(!page.categoriesShown());
    QVERIFY(!page.categoriesToggle()->isEnabled());
    for (QCPGraph* graph : page.categoryGraphs()) {
      QVERIFY(!graph->visible());
      QVERIFY(graph->data()->isEmpty());
      QVERIFY(!page.plot()->legend->hasItemWithPlottable(graph));
    }
    // The memory curves are still drawn.
    QVERIFY(!page.slice().buckets.empty());
  }

  void switchingFromALabelledToAnUnlabelledRunDropsTheStack() {
    TimelinePage page;
    page.resize(1000, 500);
    page.show();
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &TimelinePage::categoriesReady);
    page.setRun(m_labelled);
    QVERIFY(waitForCategories(page, ready));
    QVERIFY(page.categoriesShown());
    ready.clear();
    page.setRun(m_unlabelled);
    QVERIFY(waitForCategories(page, ready));
    QVERIFY(!page.categoriesShown());
    for (QCPGraph* graph : page.categoryGraphs())
      QVERIFY(graph->data()->isEmpty());
  }

  // Opening a run draws its curves once, at one bucket per pixel of the plot as it is laid out
  // with that run's axis labels and legend: no second query once the first curves are on screen
  // (a run switched to used to be asked again, and its stack 250 ms later, after the new tick
  // labels or legend entries had changed the axis rect's width; #19's open-until-drawn time).
  void openedRunIsDrawnOnceAtTheSettledWidth() {
    TimelinePage page;
    page.resize(1000, 500);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    page.setDatabase(m_db);
    // Tick labels in MiB and in GiB, with and without the category legend and the cap's entry.
    for (const storage::RunId run :
         {m_labelled, m_stacked, m_unlabelled, m_labelled, m_midRun, m_stacked}) {
      QSignalSpy data(&page, &TimelinePage::dataReady);
      page.setRun(run);
      QVERIFY(test::waitFor([&] { return page.slice().run == run && !page.busy(); }));
      QCOMPARE(data.count(), 1);
      QCOMPARE(page.slice().buckets.size(),
               static_cast<std::size_t>(page.plot()->axisRect()->width()));
    }
  }

  // The Active Memory page colours a labelled run's bands by category (the Timeline's colours),
  // a run without labels by stack when it has stacks, else one colour per allocation; "by stack"
  // gives the allocations of one stack one colour (issue #17: "coloured by category or by
  // stack").
  void activeMemoryColoursByCategoryOrStack() {
    BandTimelinePage page(LifetimeKind::allocations);
    page.resize(1000, 500);
    page.show();
    page.setDatabase(m_db);
    page.setRun(m_labelled);
    QVERIFY(test::waitFor([&] { return page.data().run == m_labelled && !page.busy(); }, 60000));
    const Lifetimes& labelled = *page.data().lifetimes;
    QVERIFY(labelled.labelled);
    QCOMPARE(page.colouring()->currentData().toInt(),
             static_cast<int>(BandTimelinePage::Colouring::category));
    std::size_t activations = 0;
    for (std::size_t i = 0; i < labelled.items.size(); ++i) {
      QCOMPARE(page.colourOf(i), colors::category(labelled.items[i].category));
      activations += labelled.items[i].category == Category::activation ? 1 : 0;
    }
    QVERIFY(activations > 0);

    page.setRun(m_stacked);
    QVERIFY(test::waitFor([&] { return page.data().run == m_stacked && !page.busy(); }, 60000));
    const Lifetimes& stacked = *page.data().lifetimes;
    QVERIFY(!stacked.labelled && stacked.hasStacks);
    QCOMPARE(page.colouring()->currentData().toInt(),
             static_cast<int>(BandTimelinePage::Colouring::stack));
    std::map<std::uint32_t, QColor> byStack;
    for (std::size_t i = 0; i < stacked.items.size(); ++i) {
      const auto [it, added] = byStack.emplace(stacked.items[i].frames.value, page.colourOf(i));
      QCOMPARE(page.colourOf(i), it->second);
    }
    QVERIFY(byStack.size() >= 2);
    QVERIFY(byStack.at(1) != byStack.at(2));
  }

  // A trace that starts mid-run says so in the Timeline's header (issue #17: "truncated or
  // mid-run traces are not marked in the header").
  void midRunTraceIsMarkedInTheHeader() {
    TimelinePage page;
    page.resize(1000, 500);
    page.show();
    page.setDatabase(m_db);
    QSignalSpy data(&page, &TimelinePage::dataReady);
    const auto header = [&] {
      QString text;
      for (const QLabel* label : page.findChildren<QLabel*>())
        text += label->text();
      return text;
    };
    page.setRun(m_unlabelled);
    QVERIFY(test::waitFor([&] { return page.overview() && !page.busy(); }));
    QVERIFY(!header().contains(QStringLiteral("starts mid-run")));
    page.setRun(m_midRun);
    QVERIFY(test::waitFor([&] { return page.overview() && !page.busy(); }));
    QVERIFY2(header().contains(QStringLiteral("starts mid-run")), qPrintable(header()));
  }
};

QTEST_MAIN(TestTimelineCategories)
#include "tst_timeline_categories.moc"
