// The Jobs page: a real 2-rank DDP job (gloo, one H200; the rank 1 that ran out of memory
// because its sequences were longer) imported into a temporary database — the imbalance table's
// rows and worst rank, the small multiples (one per rank, one shared scale), and activating a rank.
#include <qcustomplot.h>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gui/format.h"
#include "gui/job_page.h"
#include "gui/main_window.h"
#include "gui/report.h"
#include "gui/timeline_page.h"
#include "storage/db/job_import.h"

using namespace fragscope;

namespace {

const std::filesystem::path kJob = std::filesystem::path(FRAGSCOPE_FIXTURES).parent_path() /
                                   "ddp-gloo-2.11-h200" / "ddp_gloo_gpt_imbalance";

bool waitUntil(const std::function<bool()>& done, int ms = 20000) {
  QElapsedTimer timer;
  timer.start();
  while (!done() && timer.elapsed() < ms)
    QTest::qWait(20);
  return done();
}

}  // namespace

class TestJobPage : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("jobs.db"));
    storage::RunStore store(m_db.toStdString());
    m_result = storage::import_job(
        store, storage::job_source_of({(kJob / storage::kJobManifestName).string()}), {});
  }

  void modelHasOneRowPerRankAndMarksTheWorst() {
    storage::RunStore store(m_db.toStdString());
    const storage::JobRecord job = storage::job(store, m_result.job);
    gui::JobBalanceModel model;
    model.resetData(storage::job_balance(store, job));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), int(gui::JobBalanceModel::ColumnCount));
    // rank 1 recorded the OOM (its stats file says so), so it is the worst one
    std::ifstream in(kJob / "ddp_gloo_gpt_imbalance_rank1.stats.json");
    const auto stats = nlohmann::json::parse(in);
    QVERIFY(stats["outcome"].get<std::string>().rfind("oom", 0) == 0);
    QCOMPARE(model.worstRow(), 1);
    QVERIFY(model.index(1, 0).data(gui::JobBalanceModel::WorstRole).toBool());
    QVERIFY(!model.index(0, 0).data(gui::JobBalanceModel::WorstRole).toBool());
    QVERIFY(model.index(1, 0).data(Qt::FontRole).value<QFont>().bold());
    QCOMPARE(model.index(1, gui::JobBalanceModel::OomColumn).data().toString(),
             QStringLiteral("OOM"));
    QCOMPARE(model.index(1, gui::JobBalanceModel::ReservedColumn)
                 .data(gui::JobBalanceModel::SortRole)
                 .toDouble(),
             stats["memory_stats"]["reserved_bytes.all.peak"].get<double>());
    QCOMPARE(model.index(0, 0).data(gui::JobBalanceModel::RunIdRole).toLongLong(),
             m_result.ranks[0].result.run.value);
  }

  void pageShowsSmallMultiplesOnOneScaleAndOpensARank() {
    gui::JobPage page;
    page.resize(1000, 700);
    QSignalSpy ready(&page, &gui::JobPage::dataReady);
    page.setDatabase(m_db);
    QVERIFY(waitUntil([&] { return ready.count() > 0 && !page.busy(); }));
    QCOMPARE(page.jobChoice()->count(), 1);
    QCOMPARE(page.data().ranks.size(), std::size_t{2});
    const auto plots = page.multiples()->findChildren<QCustomPlot*>();
    QCOMPARE(plots.size(), 2);
    QCOMPARE(plots[0]->yAxis->range().upper, plots[1]->yAxis->range().upper);
    QCOMPARE(plots[0]->xAxis->range().upper, plots[1]->xAxis->range().upper);
    QVERIFY(plots[0]->graphCount() == 2 && plots[0]->graph(0)->dataCount() > 0);
    // by share of events: both axes end at 100 %
    page.setAlignment(gui::JobPage::Alignment::share);
    const auto shared = page.multiples()->findChildren<QCustomPlot*>();
    QCOMPARE(shared.size(), 2);
    QCOMPARE(shared[0]->xAxis->range().upper, 100.0);

    QSignalSpy activated(&page, &gui::JobPage::rankActivated);
    emit page.table()->activated(page.model()->index(1, 0));
    QCOMPARE(activated.count(), 1);
    QCOMPARE(activated.first().first().value<storage::RunId>().value,
             m_result.ranks[1].result.run.value);
  }

  void reportOfARankIncludesItsJobsImbalanceTable() {
    const gui::ReportData data = gui::loadReportData(m_db, {m_result.ranks[0].result.run});
    QCOMPARE(data.jobs.size(), std::size_t{1});
    QCOMPARE(data.jobs[0].worst_rank.value(), 1);
    const QString html = gui::reportHtml(data, gui::ReportPlots{}, true);
    QVERIFY(html.contains(QStringLiteral("Job ddp_gloo_gpt_imbalance")));
    QVERIFY(html.contains(QStringLiteral("Fragmentation")));
  }

  // The report carries the job's small multiples: one image after the run's own plot, under the
  // job's table, with both ranks drawn (each rank's color appears in its half).
  void reportDrawsTheJobsSmallMultiples() {
    const gui::ReportData data = gui::loadReportData(m_db, {m_result.ranks[0].result.run});
    QCOMPARE(data.jobViews.size(), std::size_t{1});
    QCOMPARE(data.jobViews[0].ranks.size(), std::size_t{2});
    const gui::ReportPlots plots = gui::renderReportPlots(data);
    QCOMPARE(plots.runs.size(), std::size_t{1});
    QCOMPARE(plots.jobs.size(), std::size_t{1});
    const QImage& job = plots.jobs[0];
    QCOMPARE(job.width(), 1200);
    for (int half = 0; half < 2; ++half) {
      const QColor color = gui::colors::run(half);
      bool found = false;
      for (int y = 0; y < job.height() && !found; ++y)
        for (int x = half * 600; x < (half + 1) * 600 && !found; ++x)
          found = std::abs(job.pixelColor(x, y).red() - color.red()) < 24 &&
                  std::abs(job.pixelColor(x, y).green() - color.green()) < 24 &&
                  std::abs(job.pixelColor(x, y).blue() - color.blue()) < 24;
      QVERIFY2(found, qPrintable(QStringLiteral("rank %1's color is not drawn").arg(half)));
    }
    const QString html = gui::reportHtml(data, plots, true);
    const qsizetype table = html.indexOf(QStringLiteral("Job ddp_gloo_gpt_imbalance"));
    const qsizetype image = html.indexOf(QStringLiteral("one scale"));
    QVERIFY(table >= 0 && image > table);
    // The run's plot, its segment map at the peak and the job's multiples.
    QCOMPARE(html.count(QStringLiteral("data:image/png")), 3);
  }

  // Step k spans the end of step k - 1 to its own end (the first from the rank's first event);
  // after the last end the last step's length goes on.
  void stepCoordinatesFollowTheRecordedStepEnds() {
    const std::vector<std::uint64_t> ends = {1000, 3000, 4000};
    QCOMPARE(gui::stepCoordinate(ends, 0, 0), 0.0);
    QCOMPARE(gui::stepCoordinate(ends, 0, 500), 0.5);
    QCOMPARE(gui::stepCoordinate(ends, 0, 1000), 1.0);
    QCOMPARE(gui::stepCoordinate(ends, 0, 2000), 1.5);
    QCOMPARE(gui::stepCoordinate(ends, 0, 3500), 2.5);
    QCOMPARE(gui::stepCoordinate(ends, 0, 4500), 3.5);
    QCOMPARE(gui::stepCoordinate({}, 0, 4500), 0.0);
  }

  // Two ranks whose steps took different times line up: the same step is the same x, and a rank
  // recorded without step times says so instead of being drawn on a wrong axis.
  void stepAlignmentLinesUpRanksOfDifferentSpeeds() {
    gui::JobViewData data;
    for (int r = 0; r < 3; ++r) {
      gui::JobRankView rank;
      rank.rank = r;
      rank.record.event_count = 4;
      const std::uint64_t length = r == 0 ? 1000 : 3000;  // rank 1 is three times slower
      for (std::uint64_t b = 0; b < 4; ++b) {
        storage::TimelineBucket bucket;
        bucket.t0_us = static_cast<std::int64_t>(b * length);
        bucket.t1_us = static_cast<std::int64_t>((b + 1) * length);
        bucket.first_event = b;
        bucket.max.reserved = bucket.max.allocated = (b + 1) * 1000;
        rank.timeline.push_back(bucket);
      }
      if (r < 2)
        rank.stepEndsUs = {length, 2 * length, 3 * length, 4 * length};
      data.ranks.push_back(rank);
    }
    const gui::JobPlotScale scale = gui::jobPlotScale(data);
    QCOMPARE(scale.steps, 4.0);
    std::vector<std::unique_ptr<QCustomPlot>> plots;
    for (int r = 0; r < 3; ++r) {
      plots.push_back(std::make_unique<QCustomPlot>());
      gui::drawRankPlot(plots.back().get(), data.ranks[static_cast<std::size_t>(r)], r, false,
                        gui::JobAlignment::step, scale);
    }
    for (int b = 0; b < 4; ++b)
      QCOMPARE(plots[0]->graph(0)->data()->at(b)->key, plots[1]->graph(0)->data()->at(b)->key);
    QCOMPARE(plots[1]->graph(0)->data()->at(2)->key, 2.0);
    QCOMPARE(plots[2]->graph(0)->dataCount(), 0);
    QCOMPARE(plots[0]->xAxis->range().upper, plots[2]->xAxis->range().upper);
  }

  void mainWindowOpensTheRankThatWasActivated() {
    gui::MainWindow window;
    QVERIFY(window.openDatabase(m_db));
    QVERIFY(window.showPage(QStringLiteral("jobs")));
    QCOMPARE(window.pages()->currentWidget(), static_cast<QWidget*>(window.jobPage()));
    QVERIFY(
        waitUntil([&] { return !window.busy() && window.jobPage()->data().ranks.size() == 2; }));
    emit window.jobPage()->rankActivated(m_result.ranks[1].result.run);
    QCOMPARE(window.currentRun().value().value, m_result.ranks[1].result.run.value);
    QVERIFY(window.pages()->currentWidget() != static_cast<QWidget*>(window.jobPage()));
    QVERIFY(waitUntil([&] { return !window.busy(); }));
  }

 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::JobImportResult m_result;
};

QTEST_MAIN(TestJobPage)
#include "tst_job_page.moc"
