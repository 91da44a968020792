// The workbench end to end, offscreen: the window, the runs browser, the timeline on storage's
// buckets, the segment map against the state the events describe, comparison, import through
// the drag-and-drop code path.
#include <QAbstractItemModelTester>
#include <QMenuBar>
#include <QMimeData>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "gui/application.h"
#include "gui/band_timeline_page.h"
#include "gui/compare_page.h"
#include "gui/designer_page.h"
#include "gui/event_history_page.h"
#include "gui/main_window.h"
#include "gui/plot_style.h"
#include "gui/post_mortem_page.h"
#include "gui/runs_browser.h"
#include "gui/segment_map_page.h"
#include "gui/summary_page.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"
#include "main_window_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestMainWindow : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::RunId m_baseline, m_oom, m_expandable;
  std::vector<TraceEvent> m_baselineEvents;
  std::optional<storage::RunId> m_imported;  // gpt_oom_cap, once importThroughDragAndDrop ran

  std::unique_ptr<MainWindow> openWindow() { return openWindow(m_db); }
  std::unique_ptr<MainWindow> openWindow(const QString& db) { return test::openMainWindow(db); }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.db"));
    storage::RunStore store(m_db.toStdString());
    m_baselineEvents = test::wavyTrace(30000, 1, false, StreamId{0x55aa});
    m_baseline = test::addRun(store, "baseline", m_baselineEvents);
    m_oom =
        test::addRun(store, "capped", test::wavyTrace(20000, 2, true), {}, storage::RunStatus::oom);
    m_expandable = test::addRun(store, "expandable", test::wavyTrace(25000, 3, false),
                                "expandable_segments:True");
  }

  void smokeTest() {
    auto window = openWindow();
    QVERIFY(window);
    QVERIFY(QTest::qWaitForWindowExposed(window.get()));
    QAbstractItemModelTester tester(window->runsBrowser()->filterModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(window->runsBrowser()->model()->rowCount(), 3);
    QStringList menus;
    for (QAction* action : window->menuBar()->actions())
      menus << action->text().remove(QLatin1Char('&'));
    QCOMPARE(menus, (QStringList{QStringLiteral("File"), QStringLiteral("View"),
                                 QStringLiteral("Go"), QStringLiteral("Help")}));
    QVERIFY(window->showPage(QStringLiteral("summary")));
    QCOMPARE(window->pages()->currentWidget(), window->summaryPage());
    QVERIFY(!window->showPage(QStringLiteral("nonsense")));
    // The designer's live preview runs once at start; then nothing is loading.
    QVERIFY(test::waitFor([&] { return !window->busy(); }, 60000));
  }

  void selectingARunShowsItsTimeline() {
    auto window = openWindow();
    QVERIFY(window);
    TimelinePage* timeline = window->timelinePage();
    const storage::RunRecord record = storage::RunStore(m_db.toStdString()).run(m_baseline);
    // Waits on what the page shows, not on a signal: under load the layout settles late and the
    // page re-queries at the new width, so the first dataReady may be a slice about to be
    // replaced, and a signal may arrive before the spy starts waiting.
    const auto shows = [&](std::uint64_t first, std::uint64_t end) {
      return test::waitFor(
          [&] {
            return !timeline->busy() && timeline->slice().run == m_baseline &&
                   timeline->slice().first == first && timeline->slice().end == end &&
                   !timeline->slice().buckets.empty();
          },
          120000);
    };
    window->runsBrowser()->selectRuns({m_baseline});
    QVERIFY(shows(0, record.event_count));
    QCOMPARE(window->currentRun(), std::optional<storage::RunId>(m_baseline));
    // One bucket per pixel at most, also after the window's layout has settled (a narrower plot
    // asks again).
    QVERIFY2(test::waitFor(
                 [&] {
                   return !timeline->busy() &&
                          timeline->slice().buckets.size() <=
                              static_cast<std::size_t>(timeline->plot()->axisRect()->width());
                 },
                 120000),
             qPrintable(QStringLiteral("%1 buckets, axis %2 px, plot %3 px")
                            .arg(timeline->slice().buckets.size())
                            .arg(timeline->plot()->axisRect()->width())
                            .arg(timeline->plot()->width())));
    // Zoomed out to a few hundred buckets the plot still reaches the run's exact peak.
    double plottedPeak = 0;
    QCPGraph* reserved = timeline->plot()->graph(0);
    for (auto it = reserved->data()->constBegin(); it != reserved->data()->constEnd(); ++it)
      plottedPeak = std::max(plottedPeak, it->value);
    QCOMPARE(plottedPeak, double(summaryPeak(record, "reserved")));
    QVERIFY(timeline->plot()->yAxis->range().upper >= plottedPeak);

    // Zooming re-queries the store for just that range, and Back restores the whole run.
    timeline->zoomStack()->zoomTo({1000, 3000});
    QVERIFY(shows(1000, 3000));
    QCOMPARE(timeline->slice().buckets.front().first_event, 1000u);
    QCOMPARE(timeline->slice().buckets.back().end_event, 3000u);
    timeline->zoomStack()->backAction()->trigger();
    QVERIFY(shows(0, record.event_count));

    const QString csv = timeline->timelineCsv();
    QVERIFY(csv.startsWith(QStringLiteral("first_event,end_event")));
    QCOMPARE(csv.count(QLatin1Char('\n')),
             static_cast<qsizetype>(timeline->slice().buckets.size() + 1));
    const QString png = m_dir.filePath(QStringLiteral("plot.png"));
    const QString svg = m_dir.filePath(QStringLiteral("plot.svg"));
    QString error;
    QVERIFY2(timeline->savePlot(png, &error), qPrintable(error));
    QVERIFY2(timeline->savePlot(svg, &error), qPrintable(error));
    QVERIFY(QImage(png).width() > 0);
    QVERIFY(!timeline->savePlot(m_dir.filePath(QStringLiteral("plot.bmpx")), &error));
    QVERIFY(error.contains(QStringLiteral("plot.bmpx")));
  }

  void segmentMapAtChosenEventEqualsTheTrace() {
    auto window = openWindow();
    QVERIFY(window);
    SegmentMapPage* segments = window->segmentMapPage();
    QSignalSpy overview(window->timelinePage(), &TimelinePage::overviewReady);
    window->showRun(m_baseline);
    QVERIFY(overview.wait(20000));
    QSignalSpy state(segments, &SegmentMapPage::snapshotReady);
    const std::uint64_t chosen = 12345;
    window->timelinePage()->setCursorEvent(chosen);
    QVERIFY(test::waitFor(
        [&] { return segments->snapshot() && segments->snapshot()->eventIndex == chosen; }));

    // The state the first `chosen` events describe, built here from the events alone.
    storage::SegmentMap expected;
    for (std::size_t i = 0; i < chosen; ++i)
      expected.apply(m_baselineEvents[i]);
    QCOMPARE(segments->snapshot()->state.segments(), expected.segments());
    QCOMPARE(segments->snapshot()->state.blocks(), expected.blocks());
    QVERIFY(segments->snapshot()->nextEvent);
    QCOMPARE(*segments->snapshot()->nextEvent, m_baselineEvents[chosen]);
    // What is drawn covers every segment byte for byte.
    const auto& views = segments->mapWidget()->views();
    QCOMPARE(views.size(), expected.segments().size());
    for (const SegmentView& view : views) {
      Bytes covered = 0;
      for (const Piece& piece : view.pieces)
        covered += piece.size;
      QCOMPARE(covered, view.segment.size);
    }
    Bytes live = 0;
    for (const auto& [addr, block] : expected.blocks())
      live += block.size;
    QCOMPARE(summarize(views).live, live);
    QVERIFY(!segments->mapWidget()->layoutForTest().placed.empty());

    // Arrow keys step one event, and the timeline cursor follows.
    segments->mapWidget()->setFocus();
    QTest::keyClick(segments->mapWidget(), Qt::Key_Right);
    QVERIFY(test::waitFor([&] { return segments->snapshot()->eventIndex == chosen + 1; }));
    QCOMPARE(window->timelinePage()->cursorEvent(), chosen + 1);
    QTest::keyClick(segments->mapWidget(), Qt::Key_Left);
    QTest::keyClick(segments->mapWidget(), Qt::Key_Left);
    QVERIFY(test::waitFor([&] { return segments->snapshot()->eventIndex == chosen - 1; }));

    // The summary page follows the cursor.
    QVERIFY(test::waitFor([&] {
      return window->summaryPage()->text().contains(QStringLiteral("after event 12,344"));
    }));
  }

  void anOomRunOpensAtTheOom() {
    auto window = openWindow();
    QVERIFY(window);
    window->showRun(m_oom);
    SegmentMapPage* segments = window->segmentMapPage();
    QVERIFY(test::waitFor([&] { return segments->snapshot().has_value(); }));
    const storage::RunRecord record = storage::RunStore(m_db.toStdString()).run(m_oom);
    QCOMPARE(segments->snapshot()->eventIndex, record.event_count - 1);
    QVERIFY(segments->snapshot()->nextEvent);
    QCOMPARE(int(segments->snapshot()->nextEvent->action), int(TraceAction::oom));
    QCOMPARE(window->timelinePage()->overview()->oomEvents.size(), 1u);
  }

  void comparePageWithTwoRuns() {
    auto window = openWindow();
    QVERIFY(window);
    ComparePage* compare = window->comparePage();
    QAbstractItemModelTester tester(compare->model(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy ready(compare, &ComparePage::dataReady);
    window->compareRuns({m_baseline, m_expandable});
    QVERIFY(ready.wait(20000));
    QCOMPARE(window->pages()->currentWidget(), compare);
    QCOMPARE(compare->data().runs.size(), 2u);
    QCOMPARE(compare->model()->columnCount(), 2);
    QCOMPARE(compare->reservedGraphs().size(), 2u);
    QVERIFY(compare->reservedGraphs()[0]->dataCount() > 10);
    const QStringList warnings = comparisonWarnings(compare->data());
    QCOMPARE(warnings.size(), 1);
    QVERIFY(warnings.front().contains(QStringLiteral("expandable_segments:True")));
    // The peak rows are the runs' recorded peaks.
    const storage::RunRecord base = storage::RunStore(m_db.toStdString()).run(m_baseline);
    QCOMPARE(compare->model()->index(0, 0).data(ComparisonModel::ValueRole).toDouble(),
             double(summaryPeak(base, "reserved")));
  }

  // Export > Report writes what is on screen: on the Compare page its runs, axis and story
  // (whatever the browser has selected); on a run's page the selection or the run shown.
  void reportScopeIsWhatIsOnScreen() {
    auto window = openWindow();
    QVERIFY(window);
    ComparePage* compare = window->comparePage();
    window->runsBrowser()->selectRuns({m_oom});
    QVERIFY(test::waitFor([&] { return window->currentRun() == m_oom; }, 60000));
    QCOMPARE(window->reportScope().runs, std::vector<storage::RunId>{m_oom});
    QSignalSpy ready(compare, &ComparePage::dataReady);
    compare->setRuns({m_baseline, m_expandable}, QStringLiteral("<b>the story</b>"));
    QVERIFY(window->showPage(QStringLiteral("compare")));
    QVERIFY(ready.wait(60000));
    compare->overlayAxisChoice()->setCurrentIndex(static_cast<int>(CompareAxis::share));
    const ReportScope scope = window->reportScope();
    QCOMPARE(scope.runs, (std::vector<storage::RunId>{m_baseline, m_expandable}));
    QVERIFY(scope.axis == CompareAxis::share);
    QCOMPARE(scope.story, QStringLiteral("<b>the story</b>"));
    QVERIFY(window->showPage(QStringLiteral("timeline")));
    QCOMPARE(window->reportScope().runs, std::vector<storage::RunId>{m_oom});
    QVERIFY(!window->reportScope().axis);
  }

  void renameAndDelete() {
    {
      storage::RunStore store(m_db.toStdString());
      test::addRun(store, "scratch", test::wavyTrace(500, 9, false));
    }
    auto window = openWindow();
    QVERIFY(window);
    RunsModel* model = window->runsBrowser()->model();
    QCOMPARE(model->rowCount(), 4);
    const storage::RunId scratch = model->runs().back().id;
    QVERIFY(model->setData(model->index(model->rowOf(scratch), RunsModel::NameColumn),
                           QStringLiteral("kept?")));
    QCOMPARE(storage::RunStore(m_db.toStdString()).run(scratch).name, std::string("kept?"));
    QSignalSpy changed(window.get(), &MainWindow::runsChanged);
    emit window->runsBrowser()->deleteRequested({scratch});
    QVERIFY(changed.wait(20000));
    QCOMPARE(model->rowCount(), 3);
    QVERIFY(!storage::RunStore(m_db.toStdString()).has_run(scratch));
  }

  // Deleting a run clears every page that showed it (the run's own views, the Active Memory and
  // Segments-over-time tabs, the state history, a comparison that included it); a comparison
  // without it stays.
  void deletingARunClearsEveryPageThatShowedIt() {
    const QString db = m_dir.filePath(QStringLiteral("delete.db"));
    storage::RunId doomed, other, third;
    {
      storage::RunStore store(db.toStdString());
      doomed = test::addRun(store, "doomed", test::wavyTrace(3000, 71, true), {},
                            storage::RunStatus::oom);
      other = test::addRun(store, "other", test::wavyTrace(3000, 72, false));
      third = test::addRun(store, "third", test::wavyTrace(3000, 73, false));
    }
    auto window = openWindow(db);
    QVERIFY(window);
    window->showRun(doomed);
    // The Active Memory tab loads when it is shown.
    window->showPage(MainWindow::Page::activeMemory);
    QVERIFY(test::waitFor(
        [&] {
          return !window->busy() && window->activeMemoryPage()->data().lifetimes &&
                 window->historyPage()->model()->rowCount() > 0;
        },
        60000));
    QSignalSpy compared(window->comparePage(), &ComparePage::dataReady);
    window->compareRuns({doomed, other});
    QVERIFY(compared.wait(30000));
    QVERIFY(window->comparePage()->containsRun(doomed));

    QSignalSpy changed(window.get(), &MainWindow::runsChanged);
    emit window->runsBrowser()->deleteRequested({doomed});
    QVERIFY(changed.wait(20000));
    QVERIFY(!window->timelinePage()->run());
    QVERIFY(window->welcomeShown());
    QVERIFY(!window->activeMemoryPage()->data().lifetimes);
    QCOMPARE(window->historyPage()->model()->rowCount(), 0);
    QVERIFY(window->comparePage()->data().runs.empty());
    QVERIFY(!window->comparePage()->containsRun(doomed));

    // A comparison of other runs is left alone.
    compared.clear();
    window->compareRuns({other, third});
    QVERIFY(compared.wait(30000));
    changed.clear();
    {
      storage::RunStore store(db.toStdString());
      test::addRun(store, "scratch", test::wavyTrace(300, 74, false));
    }
    window->refreshRuns();
    const storage::RunId scratch = window->runsBrowser()->model()->runs().back().id;
    emit window->runsBrowser()->deleteRequested({scratch});
    QVERIFY(changed.wait(20000));
    QCOMPARE(window->comparePage()->data().runs.size(), 2u);
    QVERIFY(test::waitFor([&] { return !window->busy(); }, 60000));
  }

  void importThroughDragAndDrop() {
    auto window = openWindow();
    QVERIFY(window);
    const QString fixture = QStringLiteral(FRAGSCOPE_FIXTURES "/gpt_oom_cap.pickle.gz");
    QVERIFY(QFile::exists(fixture));
    QSignalSpy finished(window.get(), &MainWindow::importFinished);
    QSignalSpy failed(window.get(), &MainWindow::importFailed);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(fixture)});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(window.get(), &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(window.get(), &drop);
    QVERIFY(test::waitFor([&] { return finished.count() + failed.count() > 0; }, 60000));
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.at(0).at(0).toString()));
    const auto run = finished.at(0).at(0).value<storage::RunId>();
    const storage::RunRecord record = storage::RunStore(m_db.toStdString()).run(run);
    QCOMPARE(record.name, std::string("gpt_oom_cap"));
    QCOMPARE(record.source, storage::RunSource::imported);
    QCOMPARE(record.status, storage::RunStatus::oom);
    QCOMPARE(record.event_count, 22135u);  // trace entries, README of the fixtures
    QCOMPARE(record.environment.gpu_name, std::string("NVIDIA H200"));
    QCOMPARE(record.environment.torch_version, std::string("2.11.0+cu130"));
    QVERIFY(record.summary.contains("memory_stats"));
    // The recorded peak reserved (stats.json) is what the trace's own segment events add up to.
    QCOMPARE(summaryPeak(record, "reserved"),
             record.summary["memory_stats"]["reserved_bytes.all.peak"].get<std::int64_t>());
    QCOMPARE(window->runsBrowser()->model()->rowOf(run) >= 0, true);
    QCOMPARE(record.summary["allowed_bytes"].get<Bytes>(), 6 * kGiB);
    m_imported = run;

    // A file that is not a snapshot is refused with its name in the message.
    const QString bogus = m_dir.filePath(QStringLiteral("bogus.pickle"));
    QFile file(bogus);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("not a pickle");
    file.close();
    failed.clear();
    window->importFiles({bogus});
    QVERIFY(failed.wait(20000));
    QVERIFY2(failed.at(0).at(0).toString().contains(QStringLiteral("bogus.pickle")),
             qPrintable(failed.at(0).at(0).toString()));
  }

  void postMortemOfTheRealOom() {
    if (!m_imported)
      QSKIP("needs importThroughDragAndDrop");
    auto window = openWindow();
    QVERIFY(window);
    PostMortemPage* page = window->postMortemPage();
    QAbstractItemModelTester tester(page->model(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy ready(page, &PostMortemPage::dataReady);
    window->runsBrowser()->selectRuns({*m_imported});
    QVERIFY(ready.wait(120000));
    QVERIFY(window->showPage(QStringLiteral("postmortem")));
    const PostMortemData& data = *page->data();
    QCOMPARE(data.limit, std::optional<Bytes>(6 * kGiB));
    QCOMPARE(data.postMortems.size(), 1u);
    // PyTorch's message: "Tried to allocate 168.00 MiB ... 6.00 GiB allowed".
    QCOMPARE(data.postMortems.front().segment_size, 168 * kMiB);
    QVERIFY(data.whatIf);
    QVERIFY(page->model()->rowCount() >= 5);
    const analysis::WhatIfRow* baseline = data.whatIf->baseline();
    QVERIFY(baseline);
    QVERIFY2(!baseline->ok, "the baseline replay must hit the recorded OOM");
    QVERIFY(page->table()->indexWidget(page->model()->index(0, WhatIfModel::ActionColumn)));

    // The Run button of the best row stores a new simulated run and opens the comparison.
    QSignalSpy stored(page, &PostMortemPage::mitigationStored);
    QSignalSpy compared(window->comparePage(), &ComparePage::dataReady);
    qobject_cast<QPushButton*>(
        page->table()->indexWidget(page->model()->index(0, WhatIfModel::ActionColumn)))
        ->click();
    QVERIFY(stored.wait(120000));
    const auto created = stored.at(0).at(1).value<storage::RunId>();
    const storage::RunRecord replay = storage::RunStore(m_db.toStdString()).run(created);
    QCOMPARE(replay.source, storage::RunSource::simulated);
    QCOMPARE(replay.status,
             data.whatIf->best()->ok ? storage::RunStatus::ok : storage::RunStatus::oom);
    QCOMPARE(static_cast<Bytes>(summaryPeak(replay, "reserved")),
             data.whatIf->best()->peak_reserved);
    QVERIFY(compared.wait(60000));
    QCOMPARE(window->comparePage()->data().runs.size(), 2u);
  }

  void designerRunsASmallExperiment() {
    auto window = openWindow();
    QVERIFY(window);
    DesignerPage* designer = window->designerPage();
    nlohmann::json experiment = defaultExperiment();
    experiment["name"] = "tiny";
    experiment["model"]["layers"] = 2;
    experiment["model"]["hidden"] = 128;
    experiment["model"]["heads"] = 4;
    experiment["training"]["steps"] = 2;
    experiment["variants"] =
        nlohmann::json::array({{{"name", "tiny-default"}, {"set", nlohmann::json::object()}},
                               {{"name", "tiny-expandable"},
                                {"set", {{"allocator.alloc_conf", "expandable_segments:True"}}}}});
    QSignalSpy preview(designer, &DesignerPage::previewReady);
    designer->setDocument(experiment);
    QVERIFY2(designer->validationError().isEmpty(), qPrintable(designer->validationError()));
    QCOMPARE(designer->histogramLengths().size(), 2u * 1u);  // steps x grad_accum micro-batches
    QVERIFY(preview.wait(60000));
    QVERIFY(designer->preview()->peakReserved > 0);
    // A bad value is reported with its JSON path and disables Run.
    nlohmann::json bad = experiment;
    bad["training"]["batch_size"] = -4;
    designer->setDocument(bad);
    QVERIFY(designer->validationError().contains(QStringLiteral("batch_size")));
    designer->setDocument(experiment);

    QSignalSpy stored(designer, &DesignerPage::experimentStored);
    QSignalSpy compared(window->comparePage(), &ComparePage::dataReady);
    designer->runExperiment();
    QVERIFY(designer->running());
    QVERIFY(stored.wait(120000));
    const auto runs = stored.at(0).at(0).value<std::vector<storage::RunId>>();
    QCOMPARE(runs.size(), 2u);
    // Its curves: the comparison of the two points opens with both runs plotted.
    QVERIFY(compared.wait(60000));
    QCOMPARE(window->comparePage()->data().runs.size(), 2u);
    QVERIFY(window->comparePage()->overlayPlot()->graph(0)->dataCount() > 2);
    const storage::RunRecord first = storage::RunStore(m_db.toStdString()).run(runs[0]);
    QCOMPARE(first.name, std::string("tiny-default"));
    QVERIFY(summaryPeak(first, "reserved") > 0);
  }

  // The bundled case study, stored twice (the newest copy counts) beside a decoy experiment
  // whose runs carry the same variant names: the action compares the newest copy's
  // baseline-bs16 and mitigated runs.
  void openingTheCaseStudyComparesBaselineWithMitigated() {
    std::ifstream file(FRAGSCOPE_FIXTURES "/../../../experiments/case-study-1.2b-a100-40gb.json");
    QVERIFY(file.good());
    const nlohmann::json definition = nlohmann::json::parse(file);
    const std::string name = definition.at("name").get<std::string>();
    const QString db = m_dir.filePath(QStringLiteral("case-study.db"));
    std::optional<storage::RunId> baseline, mitigated;
    {
      storage::RunStore store(db.toStdString());
      std::uint32_t seed = 100;
      const auto storeExperiment = [&](const std::string& experimentName) {
        const storage::ExperimentId experiment =
            store.create_experiment(experimentName, definition);
        std::map<std::string, storage::RunId> runs;
        for (const auto& variant : definition.at("variants")) {
          storage::RunRecord record;
          record.experiment = experiment;
          record.name = variant.at("name").get<std::string>();
          record.device_name = "NVIDIA A100-SXM4-40GB";
          const storage::RunId run = store.begin_run(record);
          store.append_events(run, test::wavyTrace(3000, ++seed, false));
          runs[record.name] = store.finish_run(run, storage::RunStatus::ok).id;
        }
        return runs;
      };
      storeExperiment("a-different-experiment");
      storeExperiment(name);
      const auto newest = storeExperiment(name);
      baseline = newest.at("baseline-bs16");
      mitigated = newest.at("mitigated");
    }
    auto window = openWindow(db);
    QVERIFY(window);
    auto* action = window->findChild<QAction*>(QStringLiteral("openCaseStudy"));
    QVERIFY(action);
    // Offered in the File and the Help menu.
    int menus = 0;
    for (QAction* menu : window->menuBar()->actions())
      if (menu->menu() && menu->menu()->actions().contains(action))
        ++menus;
    QCOMPARE(menus, 2);
    ComparePage* compare = window->comparePage();
    QSignalSpy ready(compare, &ComparePage::dataReady);
    action->trigger();
    QVERIFY(ready.wait(20000));
    QCOMPARE(window->pages()->currentWidget(), compare);
    // Both stories, from the newest copy: capacity (baseline-bs16, mitigated) and
    // fragmentation (varlen-bs6, varlen-bs6-expandable).
    QCOMPARE(compare->data().runs.size(), 4u);
    QCOMPARE(compare->data().runs[0].record.id, *baseline);
    QCOMPARE(compare->data().runs[1].record.id, *mitigated);
    const std::vector<std::string> names{"baseline-bs16", "mitigated", "varlen-bs6",
                                         "varlen-bs6-expandable"};
    for (std::size_t i = 0; i < names.size(); ++i)
      QCOMPARE(compare->data().runs[i].record.name, names[i]);
    QVERIFY(compare->storyLabel()->isVisible());
    QVERIFY(test::waitFor([&] { return !window->busy(); }, 60000));
  }

  // A run that stops at its OOM beside one that trains to the end: the overlay lines them up by
  // the share of each run's own events (each curve ends at 100 %); the user can switch back.
  void compareOverlaysRunsOfDifferentLengthsByShare() {
    const QString db = m_dir.filePath(QStringLiteral("lengths.db"));
    std::vector<storage::RunId> runs;
    {
      storage::RunStore store(db.toStdString());
      runs.push_back(test::addRun(store, "short", test::wavyTrace(1000, 61, true), {},
                                  storage::RunStatus::oom));
      runs.push_back(test::addRun(store, "long", test::wavyTrace(9000, 62, false)));
    }
    ComparePage page;
    page.setDatabase(db);
    QSignalSpy ready(&page, &ComparePage::dataReady);
    page.setRuns(runs);
    QVERIFY(ready.wait(20000));
    QVERIFY(page.overlayByShare());
    const auto lastKey = [&](std::size_t run) {
      const QCPGraph* graph = page.reservedGraphs().at(run);
      return graph->data()->isEmpty() ? -1.0 : (graph->data()->constEnd() - 1)->key;
    };
    QCOMPARE(page.overlayPlot()->xAxis->range().upper, 100.0);
    QCOMPARE(page.reservedGraphs().size(), 2u);
    for (std::size_t run = 0; run < 2; ++run)
      QCOMPARE(lastKey(run), 100.0);

    page.overlayAxisChoice()->setCurrentIndex(0);
    QVERIFY(!page.overlayByShare());
    QCOMPARE(page.overlayPlot()->xAxis->range().upper, 9000.0);
    QCOMPARE(lastKey(0), 1000.0);
    QCOMPARE(lastKey(1), 9000.0);

    // Runs of similar length keep event indices.
    ready.clear();
    page.setRuns({runs[1], runs[1]});
    QVERIFY(ready.wait(20000));
    QVERIFY(!page.overlayByShare());
  }

  void cancellingAnImportWritesNothing() {
    auto window = openWindow();
    QVERIFY(window);
    const auto before = storage::RunStore(m_db.toStdString()).run_count();
    window->importFiles({QStringLiteral(FRAGSCOPE_FIXTURES "/random_default.pickle.gz")});
    QVERIFY(window->importing());
    window->cancelImport();
    QVERIFY(!window->importing());
    // Let the worker notice and roll back.
    QTest::qWait(3000);
    QVERIFY(test::waitFor([&] { return QThreadPool::globalInstance()->activeThreadCount() == 0; },
                          60000));
    QCOMPARE(storage::RunStore(m_db.toStdString()).run_count(), before);
  }
};

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
