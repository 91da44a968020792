// Every snapshot in ../shared/fixtures/real-world (167 files other people committed, PyTorch 2.0
// to 2.10, every device of the multi-device ones) shown in the main window: the timeline with
// its peaks on the plot (a state-only snapshot's one state too, not an empty axis), the segment
// map at the cursor, and the Summary page's memory_summary() with the allocator rules it
// followed, without an error on any page. Skips when the folder is absent (third-party data,
// never copied into the repository). ctest label real_world: the lead decides whether CI runs it.
//
// Kept cheap: each pickle is read once and imported straight into one database (the import
// itself is pinned by tests/storage/real_world_import_test.cpp), the window is opened once, and
// every wait is on the pages' own signals, never a fixed sleep.
#include <qcustomplot.h>
#include <QFile>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"
#include "gui/main_window.h"
#include "gui/runs_model.h"
#include "gui/segment_map_page.h"
#include "gui/summary_page.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"
#include "storage/db/run_store.h"
#include "storage/db/snapshot_import.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {

const std::filesystem::path kFolder =
    std::filesystem::path(FRAGSCOPE_SHARED_FIXTURES) / "real-world";

double cpuSeconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

}  // namespace

class TestRealWorld : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  struct Shown {
    storage::RunId run;
    std::string file;
    std::size_t device = 0;
  };
  std::vector<Shown> m_runs;
  std::size_t m_files = 0;

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(kFolder / "manifest.json"))
      QSKIP("../shared/fixtures/real-world is absent");
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("real-world.db"));
    std::ifstream in(kFolder / "manifest.json");
    const nlohmann::json manifest = nlohmann::json::parse(in);
    const double start = cpuSeconds();
    storage::RunStore store(m_db.toStdString());
    for (const nlohmann::json& entry : manifest) {
      const std::string file = entry.at("stored_as").get<std::string>();
      ++m_files;
      snapshot::Snapshot snap;
      try {
        snap = snapshot::read_snapshot(kFolder / file);
      } catch (const std::exception& error) {
        QFAIL(qPrintable(QStringLiteral("%1 does not open: %2")
                             .arg(QString::fromStdString(file), QString::fromUtf8(error.what()))));
      }
      for (std::size_t device = 0; device < std::max<std::size_t>(snap.device_count(), 1);
           ++device) {
        storage::ImportOptions options;
        options.name = file + " (cuda:" + std::to_string(device) + ")";
        options.source_file = file;
        options.device = device;
        try {
          m_runs.push_back({storage::import_snapshot(store, snap, options).run, file, device});
        } catch (const std::exception& error) {
          QFAIL(qPrintable(QStringLiteral("%1 device %2 does not import: %3")
                               .arg(QString::fromStdString(file))
                               .arg(device)
                               .arg(QString::fromUtf8(error.what()))));
        }
      }
    }
    qInfo("imported %zu files as %zu runs in %.1f s CPU", m_files, m_runs.size(),
          cpuSeconds() - start);
    QCOMPARE(m_files, manifest.size());
  }

  void everyRunIsShownWithoutAnError() {
    const double start = cpuSeconds();
    MainWindow window;
    QVERIFY(window.openDatabase(m_db));
    window.resize(1400, 900);
    window.show();
    TimelinePage* timeline = window.timelinePage();
    SegmentMapPage* segments = window.segmentMapPage();
    SummaryPage* summary = window.summaryPage();
    QSignalSpy timelineErrors(timeline, &TimelinePage::errorOccurred);
    storage::RunStore store(m_db.toStdString());
    std::size_t midRun = 0;
    std::size_t stateOnly = 0;
    for (const Shown& shown : m_runs) {
      const QString what = QStringLiteral("%1 (device %2)")
                               .arg(QString::fromStdString(shown.file))
                               .arg(shown.device);
      const storage::RunRecord record = store.run(shown.run);
      QSignalSpy summaryReady(summary, &SummaryPage::pytorchSummaryReady);
      window.showRun(shown.run);
      // The timeline's overview and buckets, the segment map at the cursor and the summary
      // replayed to the same event (or its error) for this run.
      const bool settled = test::waitFor(
          [&] {
            const auto& map = segments->snapshot();
            const auto& pytorch = summary->pytorchSummary();
            return !timeline->busy() && map && map->run == shown.run && !summary->busy() &&
                   ((pytorch && pytorch->run == shown.run &&
                     pytorch->eventIndex >= std::min(map->eventIndex, record.event_count)) ||
                    !summary->replayError().isEmpty());
          },
          120000);
      QVERIFY2(settled, qPrintable(what + QStringLiteral(" did not settle")));
      QVERIFY2(summary->replayError().isEmpty(),
               qPrintable(what + QStringLiteral(": memory_summary(): ") + summary->replayError()));
      // QVERIFY2 builds its message even when the check passes: only read an error that is there.
      const QString timelineError =
          timelineErrors.isEmpty() ? QString() : timelineErrors.first().first().toString();
      QVERIFY2(timelineErrors.isEmpty(), qPrintable(what + QStringLiteral(": ") + timelineError));
      // The peaks are on the plot: the value axis reaches peak reserved (a state-only run's one
      // state included), not an empty default axis.
      const double reserved = static_cast<double>(summaryPeak(record, "reserved"));
      QVERIFY2(reserved == 0 || timeline->plot()->yAxis->range().upper >= reserved,
               qPrintable(what + QStringLiteral(": value axis ends at %1, peak reserved %2")
                                     .arg(timeline->plot()->yAxis->range().upper)
                                     .arg(reserved)));
      // The summary names the allocator rules it replayed with.
      QVERIFY2(summary->text().contains(QStringLiteral("Allocator rules:")),
               qPrintable(what + QStringLiteral(": no allocator rules line")));
      QVERIFY2(!summary->pytorchSummary()->torchVersion.isEmpty(), qPrintable(what));
      midRun += runStartsMidRun(record) ? 1 : 0;
      stateOnly += record.event_count == 0 ? 1 : 0;
    }
    qInfo("showed %zu runs (%zu mid-run, %zu state only) in %.1f s CPU", m_runs.size(), midRun,
          stateOnly, cpuSeconds() - start);
  }
};

QTEST_MAIN(TestRealWorld)
#include "tst_real_world.moc"
