// Issue #18: an inconsistent snapshot imports (its trace alone gives the series), and the GUI says
// so on the run, not only in a status line that the next import replaces: the import's result,
// the timeline header, the runs list's tooltip and the report all name the warning.
#include <QLabel>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>

#include "engine/snapshot/pickle_writer.h"
#include "engine/snapshot/snapshot.h"
#include "gui/main_window.h"
#include "gui/runs_browser.h"
#include "gui/runs_model.h"
#include "gui/snapshot_import.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"
#include "main_window_test_util.h"
#include "storage/db/run_store.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestImportWarnings : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;
  QString m_db;
  QString m_inconsistent;

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.db"));
    // The same block allocated twice: no layout can hold it.
    snapshot::Snapshot snap =
        snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/gpt_oom_cap.pickle.gz");
    auto& trace = snap.device_traces.at(0);
    const auto first_alloc = std::find_if(trace.begin(), trace.end(), [](const TraceEvent& e) {
      return e.action == TraceAction::alloc;
    });
    QVERIFY(first_alloc != trace.end());
    trace.insert(first_alloc + 1, *first_alloc);
    m_inconsistent = m_dir.filePath(QStringLiteral("twice.pickle"));
    snapshot::write_snapshot(snap, m_inconsistent.toStdString());
  }

  void importReportsTheInconsistency() {
    const ImportResult result = importSnapshotFile(m_db, m_inconsistent, nullptr, {});
    QVERIFY2(result.warnings.join(QLatin1Char('\n')).contains(QStringLiteral("inconsistent")),
             qPrintable(result.warnings.join(QLatin1Char('\n'))));
    const storage::RunRecord record = storage::RunStore(m_db.toStdString()).run(result.run);
    const QStringList stored = runImportWarnings(record);
    QVERIFY(!stored.isEmpty());
    QVERIFY(stored.join(QLatin1Char('\n')).contains(QStringLiteral("inconsistent")));

    RunsModel model;
    model.resetData({record});
    QVERIFY(model.index(0, RunsModel::StatusColumn)
                .data(Qt::ToolTipRole)
                .toString()
                .contains(QStringLiteral("Import warning: the snapshot is inconsistent")));
  }

  void timelineHeaderShowsTheWarning() {
    auto window = test::openMainWindow(m_db);
    QVERIFY(window);
    const std::vector<storage::RunRecord> runs = storage::RunStore(m_db.toStdString()).list_runs();
    QVERIFY(!runs.empty());
    window->runsBrowser()->selectRuns({runs.front().id});
    TimelinePage* timeline = window->timelinePage();
    const auto headerSays = [&](const QString& text) {
      const QList<QLabel*> labels = timeline->findChildren<QLabel*>();
      return std::any_of(labels.begin(), labels.end(),
                         [&](const QLabel* label) { return label->text().contains(text); });
    };
    QVERIFY(test::waitFor([&] { return headerSays(QStringLiteral("import warning:")); }, 120000));
    QVERIFY(headerSays(QStringLiteral("the snapshot is inconsistent")));
  }

  void consistentRunHasNoWarning() {
    storage::RunRecord record;
    record.name = "clean";
    QVERIFY(runImportWarnings(record).isEmpty());
    record.summary["warnings"] = nlohmann::json::array();
    QVERIFY(runImportWarnings(record).isEmpty());
  }
};

QTEST_MAIN(TestImportWarnings)
#include "tst_import_warnings.moc"
