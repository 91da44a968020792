// The review's defects and what memory_viz users expect, one behaviour per test: Shift+drag
// zoom, the first-launch page, the runs list (columns, identical names, mid-run traces, the
// Delete question), arrow keys anywhere on the run page, the cursor at the peak, the import
// percentage, --help without a display, legends that keep underscores, stacks on hover and in
// the frames panel, and the post-mortem's statements (request, shortfall, honest ranking, the
// fragmentation report of a run without OOM, the banner that agrees with the diagnosis).
#include <QHeaderView>
#include <QMouseEvent>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>

#include <qcustomplot.h>

#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "gui/application.h"
#include "gui/band_timeline_page.h"
#include "gui/compare_page.h"
#include "gui/designer_page.h"
#include "gui/main_window.h"
#include "gui/post_mortem_page.h"
#include "gui/runs_browser.h"
#include "gui/runs_model.h"
#include "gui/segment_map_page.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"
#include "main_window_test_util.h"
#include "storage/db/simulated_run.h"
#include "storage/db/snapshot_import.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {
// A run whose every allocation carries one of two stacks.
storage::RunId addRunWithStacks(storage::RunStore& store, const std::string& name,
                                std::vector<TraceEvent> events) {
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].action == TraceAction::alloc)
      events[i].frames = FrameStackId{static_cast<std::uint32_t>(1 + i % 2)};
  storage::RunRecord record;
  record.name = name;
  record.source = storage::RunSource::imported;
  const storage::RunId run = store.begin_run(record);
  const std::vector<std::vector<Frame>> stacks{
      {{"model.py", 42, "forward_attention"}, {"train.py", 7, "train_step"}},
      {{"optim.py", 99, "adam_step"}, {"train.py", 8, "train_step"}}};
  store.set_frame_stacks(run, stacks);
  store.append_events(run, events);
  return store.finish_run(run, storage::RunStatus::ok).id;
}

void sendMouse(QWidget* widget, QEvent::Type type, QPoint position, Qt::MouseButtons buttons,
               Qt::KeyboardModifiers modifiers) {
  QMouseEvent event(type, position, widget->mapToGlobal(position),
                    type == QEvent::MouseMove ? Qt::NoButton : Qt::LeftButton, buttons, modifiers);
  QCoreApplication::sendEvent(widget, &event);
}
}  // namespace

class TestReviewDefects : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::RunId m_plain, m_oom, m_stacked, m_realOom, m_realOk;
  std::vector<TraceEvent> m_plainEvents;

  std::unique_ptr<MainWindow> openWindow(const QString& db) { return test::openMainWindow(db); }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.db"));
    storage::RunStore store(m_db.toStdString());
    m_plainEvents = test::wavyTrace(20000, 11, false);
    m_plain = test::addRun(store, "plain", m_plainEvents);
    m_oom =
        test::addRun(store, "capped", test::wavyTrace(8000, 12, true), {}, storage::RunStatus::oom);
    m_stacked = addRunWithStacks(store, "stacked", test::wavyTrace(3000, 13, false));
    // Real recordings (with their stats: the 6 GiB cap of gpt_oom_cap) for the post-mortem.
    for (const auto& [name, run] :
         {std::pair{"gpt_oom_cap", &m_realOom}, std::pair{"gpt_fixedlen_default", &m_realOk}}) {
      const std::string path = std::string(FRAGSCOPE_FIXTURES "/") + name + ".pickle.gz";
      storage::ImportOptions options;
      options.name = name;
      options.recorded_stats = storage::read_companion_stats(path);
      *run = storage::import_snapshot(store, snapshot::read_snapshot(path), options).run;
    }
  }

  void firstLaunchSaysHowToStart() {
    const QString empty = m_dir.filePath(QStringLiteral("empty.db"));
    auto window = openWindow(empty);
    QVERIFY(window);
    QVERIFY(window->welcomeShown());
    QCOMPARE(window->pages()->currentIndex(), 0);
    const QString text = window->welcomeText()->text();
    QVERIFY2(text.contains(QStringLiteral("No runs yet")), qPrintable(text));
    QVERIFY(text.contains(QStringLiteral("Open Snapshot")));
    QVERIFY(text.contains(QStringLiteral("drag")));
    QVERIFY(text.contains(QStringLiteral("Case Study")));
    QVERIFY(window->welcome()->findChild<QPushButton*>(QStringLiteral("welcomeCaseStudy")));
    // A database with runs asks to pick one; picking one shows the run, not the welcome.
    auto full = openWindow(m_db);
    QVERIFY(full->welcomeShown());
    QVERIFY(full->welcomeText()->text().contains(QStringLiteral("Select a run")));
    full->runsBrowser()->selectRuns({m_plain});
    QVERIFY(!full->welcomeShown());
  }

  void shiftDragZoomsToTheBand() {
    auto window = openWindow(m_db);
    TimelinePage* timeline = window->timelinePage();
    QSignalSpy ready(timeline, &TimelinePage::dataReady);
    window->showRun(m_plain);
    QVERIFY(ready.wait(20000));
    QCPAxisRect* rect = timeline->plot()->axisRect();
    const int y = rect->center().y();
    const int left = rect->left() + rect->width() / 4;
    const int right = rect->left() + rect->width() / 2;
    const double expectedFirst = timeline->plot()->xAxis->pixelToCoord(left);
    const double expectedEnd = timeline->plot()->xAxis->pixelToCoord(right);
    QWidget* plot = timeline->plot();
    sendMouse(plot, QEvent::MouseButtonPress, {left, y}, Qt::LeftButton, Qt::ShiftModifier);
    sendMouse(plot, QEvent::MouseMove, {(left + right) / 2, y}, Qt::LeftButton, Qt::ShiftModifier);
    sendMouse(plot, QEvent::MouseMove, {right, y}, Qt::LeftButton, Qt::ShiftModifier);
    sendMouse(plot, QEvent::MouseButtonRelease, {right, y}, Qt::NoButton, Qt::ShiftModifier);
    const EventRange zoomed = timeline->zoomStack()->current();
    QVERIFY2(zoomed.first > 0 && zoomed.end < m_plainEvents.size(),
             qPrintable(QStringLiteral("%1..%2").arg(zoomed.first).arg(zoomed.end)));
    QVERIFY(std::abs(static_cast<double>(zoomed.first) - expectedFirst) <= 2);
    QVERIFY(std::abs(static_cast<double>(zoomed.end) - expectedEnd) <= 2);
    // One history step: Back returns to the whole run.
    timeline->zoomStack()->back();
    QCOMPARE(timeline->zoomStack()->current().end, std::uint64_t(m_plainEvents.size()));
  }

  void runsListShowsOutcomeAndTellsIdenticalNamesApart() {
    RunsModel model;
    storage::RunRecord a, b, c;
    a.id = storage::RunId(4);
    a.name = "bs16";
    b.id = storage::RunId(9);
    b.name = "bs16";
    b.status = storage::RunStatus::oom;
    b.summary["truncated"] = true;
    c.id = storage::RunId(10);
    c.name = "other";
    model.resetData({a, b, c});
    // What a user looks for is in the first columns.
    QCOMPARE(int(RunsModel::StatusColumn), 1);
    QCOMPARE(int(RunsModel::PeakAllocatedColumn), 2);
    QCOMPARE(int(RunsModel::PeakReservedColumn), 3);
    QCOMPARE(model.index(0, RunsModel::NameColumn).data().toString(), QStringLiteral("bs16 · #4"));
    QCOMPARE(model.index(1, RunsModel::NameColumn).data().toString(), QStringLiteral("bs16 · #9"));
    QCOMPARE(model.index(2, RunsModel::NameColumn).data().toString(), QStringLiteral("other"));
    // Editing starts from the real name.
    QCOMPARE(model.index(0, RunsModel::NameColumn).data(Qt::EditRole).toString(),
             QStringLiteral("bs16"));
    QCOMPARE(model.index(1, RunsModel::StatusColumn).data().toString(),
             QStringLiteral("oom · mid-run"));
    QVERIFY(model.index(1, RunsModel::StatusColumn)
                .data(Qt::ToolTipRole)
                .toString()
                .contains(QStringLiteral("starts mid-run")));
    // The outcome filter still matches "oom".
    RunsFilterModel filter;
    filter.setSourceModel(&model);
    filter.setStatusFilter(QStringLiteral("oom"));
    QCOMPARE(filter.rowCount(), 1);
    // Renaming one away from the clash shows plain names again.
    model.updateName(storage::RunId(4), QStringLiteral("bs16-a"));
    QCOMPARE(model.index(1, RunsModel::NameColumn).data().toString(), QStringLiteral("bs16"));
  }

  // At the first launch's dock width, name, outcome and both peaks are in view, each column
  // at least as wide as every line of its header and an "oom · mid-run" outcome.
  void runsColumnsFitTheirHeadersAtTheDefaultWidth() {
    auto window = openWindow(m_db);
    QTableView* view = window->runsBrowser()->view();
    QVERIFY(test::waitFor([&] { return view->model()->rowCount() > 0 && view->isVisible(); }));
    const QFontMetrics headers = view->horizontalHeader()->fontMetrics();
    int right = 0;
    for (int column : {int(RunsModel::NameColumn), int(RunsModel::StatusColumn),
                       int(RunsModel::PeakAllocatedColumn), int(RunsModel::PeakReservedColumn)}) {
      const QString header = view->model()->headerData(column, Qt::Horizontal).toString();
      for (const QString& line : header.split(QLatin1Char('\n')))
        QVERIFY2(view->columnWidth(column) >= headers.horizontalAdvance(line), qPrintable(line));
      right = std::max(right, view->columnViewportPosition(column) + view->columnWidth(column));
    }
    QVERIFY(view->columnWidth(RunsModel::StatusColumn) >=
            view->fontMetrics().horizontalAdvance(QStringLiteral("oom · mid-run")));
    QVERIFY2(right <= view->viewport()->width(),
             qPrintable(QStringLiteral("%1 > %2").arg(right).arg(view->viewport()->width())));
  }

  // gpt_oom_cap ran under a 6 GiB per-process cap: the Active Memory and Segments over Time
  // pages draw it as the timeline does ("6.00 GiB allowed"), inside the plotted range.
  void bandPagesDrawTheCapLine() {
    auto window = openWindow(m_db);
    window->showRun(m_realOom);
    for (BandTimelinePage* page : {window->activeMemoryPage(), window->segmentTimelinePage()}) {
      window->showPage(page == window->activeMemoryPage() ? MainWindow::Page::activeMemory
                                                          : MainWindow::Page::segmentTimeline);
      QVERIFY(test::waitFor(
          [&] { return page->data().run == m_realOom && !page->busy() && page->raster().width; },
          60000));
      QCOMPARE(page->data().limit, std::optional<Bytes>(6 * kGiB));
      // Named as the Timeline and the runs list name it, not by its database id.
      QVERIFY2(page->header()->text().startsWith(QStringLiteral("<b>gpt_oom_cap</b>")),
               qPrintable(page->header()->text()));
      QVERIFY(page->capLine()->visible());
      QCOMPARE(page->capLine()->point1->value(), 6.0 * kGiB);
      QCOMPARE(page->capLabel()->text(), QStringLiteral("6.00 GiB allowed"));
      QVERIFY(page->raster().maxBytes > static_cast<std::int64_t>(6 * kGiB));
    }
    // A run without a cap (an import without stats) has none.
    window->showRun(m_stacked);
    BandTimelinePage* page = window->segmentTimelinePage();
    QVERIFY(test::waitFor([&] { return page->data().run == m_stacked && !page->busy(); }, 60000));
    QVERIFY(!page->data().limit);
    QVERIFY(!page->capLine()->visible());
  }

  void deleteQuestionNamesTheRuns() {
    auto window = openWindow(m_db);
    const QString question = window->runsBrowser()->deleteQuestion({m_plain, m_oom});
    QVERIFY2(question.contains(QStringLiteral("plain (#%1)").arg(m_plain.value)),
             qPrintable(question));
    QVERIFY(question.contains(QStringLiteral("capped (#%1)").arg(m_oom.value)));
    QVERIFY(question.contains(QStringLiteral("2 run(s)")));
  }

  void arrowKeysStepWithoutFocusOnTheMap() {
    auto window = openWindow(m_db);
    SegmentMapPage* segments = window->segmentMapPage();
    QSignalSpy overview(window->timelinePage(), &TimelinePage::overviewReady);
    window->showRun(m_plain);
    QVERIFY(overview.wait(20000));
    window->timelinePage()->setCursorEvent(500);
    QVERIFY(test::waitFor([&] { return segments->snapshot() && segments->eventIndex() == 500; }));
    // The focus is on the timeline's plot, not on the map.
    window->activateWindow();
    window->timelinePage()->plot()->setFocus();
    QTest::keyClick(window->timelinePage()->plot(), Qt::Key_Right);
    QVERIFY(test::waitFor([&] { return segments->eventIndex() == 501; }));
    QCOMPARE(window->timelinePage()->cursorEvent(), 501u);
    QTest::keyClick(window->timelinePage()->plot(), Qt::Key_PageUp);
    QVERIFY(test::waitFor([&] { return segments->eventIndex() == 401; }));
  }

  void aRunWithoutOomOpensAtItsPeak() {
    auto window = openWindow(m_db);
    QSignalSpy overview(window->timelinePage(), &TimelinePage::overviewReady);
    window->showRun(m_plain);
    QVERIFY(overview.wait(20000));
    // The peak, computed here from the events alone (request sizes, as the trace counts them).
    std::int64_t allocated = 0, peak = -1;
    std::uint64_t peakCursor = 0;
    for (std::size_t i = 0; i < m_plainEvents.size(); ++i) {
      const TraceEvent& e = m_plainEvents[i];
      if (e.action == TraceAction::alloc)
        allocated += static_cast<std::int64_t>(e.size);
      else if (e.action == TraceAction::free_completed)
        allocated -= static_cast<std::int64_t>(e.size);
      if (allocated > peak) {
        peak = allocated;
        peakCursor = i + 1;
      }
    }
    QCOMPARE(window->timelinePage()->cursorEvent(), peakCursor);
    QVERIFY(peakCursor < m_plainEvents.size());
  }

  void importProgressShowsAPercentage() {
    auto window = openWindow(m_db);
    window->setProgress(QStringLiteral("Importing big.pickle…"), 0.42);
    QVERIFY(window->progressBar()->isTextVisible());
    QCOMPARE(window->progressBar()->text(), QStringLiteral("42%"));
    QVERIFY2(window->statusLabel()->text().contains(QStringLiteral("42%")),
             qPrintable(window->statusLabel()->text()));
  }

  void helpWorksWithoutADisplay() {
    QProcess process;
    QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
    for (const char* name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
      environment.remove(QString::fromLatin1(name));
    process.setProcessEnvironment(environment);
    process.start(QStringLiteral(FRAGSCOPE_GUI_BINARY), {QStringLiteral("--help")});
    QVERIFY(process.waitForFinished(30000));
    const QString out = QString::fromUtf8(process.readAllStandardOutput());
    QCOMPARE(process.exitStatus(), QProcess::NormalExit);
    QVERIFY2(process.exitCode() == 0,
             qPrintable(QString::fromUtf8(process.readAllStandardError())));
    QVERIFY2(out.contains(QStringLiteral("--screenshot")), qPrintable(out));
    process.start(QStringLiteral(FRAGSCOPE_GUI_BINARY), {QStringLiteral("--version")});
    QVERIFY(process.waitForFinished(30000));
    QCOMPARE(process.exitCode(), 0);
  }

  void legendKeepsUnderscores() {
    TimelinePage page;
    QStringList names;
    for (QCPGraph* graph : page.categoryGraphs())
      names << graph->name();
    QVERIFY2(names.contains(QStringLiteral("optimizer_state")), qPrintable(names.join(u',')));
  }

  void hoverAndFramesPanelShowTheBlocksStack() {
    auto window = openWindow(m_db);
    SegmentMapPage* segments = window->segmentMapPage();
    QSignalSpy overview(window->timelinePage(), &TimelinePage::overviewReady);
    window->showRun(m_stacked);
    QVERIFY(overview.wait(20000));
    window->timelinePage()->setCursorEvent(1500);
    QVERIFY(test::waitFor([&] {
      return segments->snapshot() && segments->eventIndex() == 1500 && !segments->busy();
    }));
    QVERIFY(segments->mapWidget()->stacks());
    // Click the first allocated block.
    SegmentMapWidget* map = segments->mapWidget();
    std::optional<QPointF> at;
    for (const PlacedPiece& placed : map->layoutForTest().placed) {
      const Piece& piece = map->views()[placed.segment].pieces[placed.piece];
      if (piece.kind == PieceKind::allocated && placed.rect.width() >= 3) {
        at = placed.rect.center();
        break;
      }
    }
    QVERIFY(at);
    const QPointF widgetPoint = *at + QPointF(4, 4);  // the map area's margin
    QVERIFY(map->pieceAt(widgetPoint));
    QTest::mouseClick(map, Qt::LeftButton, {}, widgetPoint.toPoint());
    const Piece* selected = map->selectedPiece();
    QVERIFY(selected);
    QVERIFY(selected->frames.value != 0);
    const QString panel = segments->framesPanel()->toPlainText();
    const QString expected = selected->frames.value == 1 ? QStringLiteral("forward_attention")
                                                         : QStringLiteral("adam_step");
    QVERIFY2(panel.contains(expected), qPrintable(panel));
    QVERIFY(panel.contains(QStringLiteral("train.py:")));
    // The hover text carries the same stack.
    const QString tip = blockStackHtml(map->stacks(), selected->frames, 12);
    QVERIFY(tip.contains(expected));
    // A block without a stack says how to record one.
    QVERIFY(blockStackHtml(map->stacks(), FrameStackId{}, 12).contains(QStringLiteral("stacks")));
  }

  void failingRequestIsStatedWithItsRoundedSize() {
    analysis::OomPostMortem oom;
    oom.requested = 0;
    oom.rounded = 167 * kMiB;
    oom.segment_size = 168 * kMiB;
    const QString text = describeFailingRequest(oom);
    QVERIFY2(!text.contains(QStringLiteral("0 B")), qPrintable(text));
    QVERIFY(text.startsWith(QStringLiteral("a request of 167 MiB")));
    QVERIFY(text.contains(QStringLiteral("168 MiB")));
    oom.requested = 100 * kMiB + 3;
    oom.rounded = 100 * kMiB + 512;
    QVERIFY(describeFailingRequest(oom).contains(QStringLiteral("rounded to")));
  }

  void postMortemRanksOnlyRowsThatFitAndBannerAgrees() {
    auto window = openWindow(m_db);
    PostMortemPage* page = window->postMortemPage();
    QSignalSpy ready(page, &PostMortemPage::dataReady);
    window->runsBrowser()->selectRuns({m_realOom});
    QVERIFY2(ready.wait(120000), qPrintable(page->headerLabel()->text()));
    const PostMortemData& data = *page->data();
    QCOMPARE(data.postMortems.size(), 1u);
    QVERIFY(data.whatIf);
    const QString header = page->headerLabel()->text();
    QVERIFY2(!header.contains(QStringLiteral("request of 0 B")), qPrintable(header));
    // The cap, not the device: "6.00 GiB allowed".
    QVERIFY2(header.contains(QStringLiteral("6.00 GiB allowed")), qPrintable(header));
    if (data.postMortems.front().cause == analysis::OomCause::capacity) {
      QVERIFY(data.shortfall() > 0);
      QVERIFY2(page->evidenceLabel()->text().contains(QStringLiteral(" short")),
               qPrintable(page->evidenceLabel()->text()));
    }
    for (int row = 0; row < page->model()->rowCount(); ++row) {
      const analysis::WhatIfRow* what = page->model()->rowAt(row);
      const QString rank = page->model()->index(row, WhatIfModel::RankColumn).data().toString();
      const QString ideal = page->model()->index(row, WhatIfModel::IdealColumn).data().toString();
      if (!what->ok) {
        QCOMPARE(rank, QStringLiteral("—"));
        QVERIFY(ideal.isEmpty());
      } else {
        QCOMPARE(rank, QString::number(what->rank));
      }
      // The setting is never repeated in its label ("expandable_segments", not
      // "expandable_segments (expandable_segments:True)").
      const QString name = page->model()->index(row, WhatIfModel::NameColumn).data().toString();
      QVERIFY2(name.count(QString::fromStdString(what->name)) == 1, qPrintable(name));
      if (!what->alloc_conf.empty())
        QVERIFY2(name.count(QString::fromStdString(what->alloc_conf)) <= 1, qPrintable(name));
      QVERIFY2(!name.contains(QStringLiteral("(") + QString::fromStdString(what->name) +
                              QLatin1Char(':')),
               qPrintable(name));
    }
    QVERIFY(page->verdictLabel()->text().contains(QStringLiteral("What to do")));
    // The segment map's banner says what the post-mortem concluded.
    SegmentMapPage* segments = window->segmentMapPage();
    QVERIFY(test::waitFor([&] {
      return segments->snapshot() && segments->snapshot()->nextEvent &&
             segments->snapshot()->nextEvent->action == TraceAction::oom;
    }));
    // The cap is a line on the timeline and the words on the OOM event.
    QCPGraph* cap = window->timelinePage()->capGraph();
    QVERIFY(!cap->data()->isEmpty());
    QCOMPARE(cap->data()->constBegin()->value, double(6 * kGiB));
    QVERIFY2(cap->name().contains(QStringLiteral("6.00 GiB allowed")), qPrintable(cap->name()));
    QVERIFY(describeEvent(*segments->snapshot()->nextEvent, 6 * kGiB)
                .contains(QStringLiteral("6.00 GiB allowed")));
    const QString cause = QString::fromLatin1(analysis::to_string(data.postMortems.front().cause));
    const QString banner = segments->mapWidget()->oomBannerTitle();
    QVERIFY2(banner.contains(cause.section(u'_', 0, 0), Qt::CaseInsensitive) ||
                 (cause == QLatin1String("other_stream") && banner.contains(u"streams")),
             qPrintable(banner + QStringLiteral(" vs ") + cause));
  }

  void aRunWithoutOomGetsAFragmentationReport() {
    auto window = openWindow(m_db);
    PostMortemPage* page = window->postMortemPage();
    QSignalSpy ready(page, &PostMortemPage::dataReady);
    window->runsBrowser()->selectRuns({m_realOk});
    QVERIFY2(ready.wait(120000), qPrintable(page->headerLabel()->text()));
    QVERIFY(page->data()->postMortems.empty());
    QVERIFY(page->headerLabel()->text().contains(QStringLiteral("did not run out of memory")));
    QVERIFY(page->data()->metrics);
    QVERIFY(page->data()->whatIf);
    QVERIFY(page->model()->rowCount() >= 3);
    QCOMPARE(page->model()->index(0, WhatIfModel::OutcomeColumn).data().toString(),
             QStringLiteral("fits"));
  }
  // The case study on a database that lacks it: the bundled experiment's four variants run in
  // the background and the two stories open side by side.
  void caseStudyRunsWhenMissingAndShowsBothStories() {
    const QString db = m_dir.filePath(QStringLiteral("fresh-case-study.db"));
    auto window = openWindow(db);
    ComparePage* compare = window->comparePage();
    QSignalSpy ready(compare, &ComparePage::dataReady);
    QVERIFY(window->caseStudyRuns().empty());
    QVERIFY(window->openCaseStudy());
    QVERIFY(window->busy());
    QVERIFY2(ready.wait(240000), qPrintable(window->statusLabel()->text()));
    QCOMPARE(compare->data().runs.size(), 4u);
    const std::vector<std::pair<std::string, storage::RunStatus>> expected{
        {"baseline-bs16", storage::RunStatus::oom},
        {"mitigated", storage::RunStatus::ok},
        {"varlen-bs6", storage::RunStatus::oom},
        {"varlen-bs6-expandable", storage::RunStatus::ok}};
    for (std::size_t i = 0; i < expected.size(); ++i) {
      QCOMPARE(compare->data().runs[i].record.name, expected[i].first);
      QCOMPARE(compare->data().runs[i].record.status, expected[i].second);
    }
    const QString story = compare->storyLabel()->text();
    QVERIFY(story.contains(QStringLiteral("Capacity")));
    QVERIFY(story.contains(QStringLiteral("Fragmentation")));
    QVERIFY(test::waitFor([&] { return !window->busy(); }, 60000));
  }

  // A capacity OOM of a simulated run: the post-mortem lists workload changes that fit (computed
  // by running them) and each row's "Open in Designer" button puts that workload in the
  // Experiment Designer and shows it.
  void postMortemOpensAWorkloadChangeInTheDesigner() {
    const QString db = m_dir.filePath(QStringLiteral("open-in-designer.db"));
    storage::RunId run;
    {
      storage::RunStore store(db.toStdString());
      const workload::Experiment experiment = workload::load_experiment(
          FRAGSCOPE_SOURCE_DIR "/experiments/case-study-1.2b-a100-40gb.json");
      const storage::ExperimentId id =
          store.create_experiment(experiment.name, experiment.definition);
      for (const workload::ExperimentPoint& point : experiment.points)
        if (point.name == "baseline-bs16")
          run = storage::store_simulated_run(store, id, point, workload::run_point(point, true));
    }
    auto window = openWindow(db);
    PostMortemPage* page = window->postMortemPage();
    QSignalSpy ready(page, &PostMortemPage::dataReady);
    window->showRun(run);
    QVERIFY(ready.wait(240000));
    QVERIFY(test::waitFor([&] { return !page->busy(); }, 240000));
    QVERIFY(page->data() && !page->data()->workloadChanges.empty());
    QPushButton* open = nullptr;
    std::string change;
    for (int row = 0; row < page->model()->rowCount() && !open; ++row) {
      auto* button = qobject_cast<QPushButton*>(
          page->table()->indexWidget(page->model()->index(row, WhatIfModel::ActionColumn)));
      if (button && button->text() == QStringLiteral("Open in Designer")) {
        open = button;
        change = page->model()->rowAt(row)->name;
      }
    }
    QVERIFY(open);
    QVERIFY(page->data()->workloadChanges.count(change));
    QVERIFY(window->designerPage()->document() != page->data()->workloadChanges.at(change));
    open->click();
    QCOMPARE(window->pages()->currentWidget(), window->designerPage());
    QCOMPARE(window->designerPage()->document(), page->data()->workloadChanges.at(change));
    QVERIFY2(window->designerPage()->validationError().isEmpty(),
             qPrintable(window->designerPage()->validationError()));
    QVERIFY(test::waitFor([&] { return !window->busy(); }, 120000));
  }
};

QTEST_MAIN(TestReviewDefects)
#include "tst_review_defects.moc"
