// Experiments in the GUI go through the status flow (storage/db/experiment_status.h): the
// designer and the case study mark an experiment incomplete with its number of runs before the
// first is stored and complete after the last, and the runs list says which runs belong to an
// incomplete experiment.
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include "gui/application.h"
#include "gui/designer_page.h"
#include "gui/main_window.h"
#include "gui/runs_browser.h"
#include "gui/runs_model.h"
#include "gui_test_util.h"
#include "storage/db/experiment_status.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestExperimentStatus : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
  }

  void designerRunsThroughTheStatusFlow() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString db = dir.filePath(QStringLiteral("designer.db"));
    DesignerPage designer;
    designer.setDatabase(db);
    nlohmann::json experiment = defaultExperiment();
    experiment["name"] = "tiny";
    experiment["model"]["layers"] = 2;
    experiment["model"]["hidden"] = 128;
    experiment["model"]["heads"] = 4;
    experiment["training"]["steps"] = 2;
    experiment["variants"] = nlohmann::json::array(
        {{{"name", "a"}, {"set", nlohmann::json::object()}},
         {{"name", "b"}, {"set", {{"allocator.alloc_conf", "expandable_segments:True"}}}}});
    designer.setDocument(experiment);
    QVERIFY2(designer.validationError().isEmpty(), qPrintable(designer.validationError()));
    QSignalSpy stored(&designer, &DesignerPage::experimentStored);
    designer.runExperiment();
    QVERIFY(stored.wait(120000));
    storage::RunStore store(db.toStdString());
    const auto experiments = storage::experiment_progress(store);
    QCOMPARE(experiments.size(), std::size_t{1});
    const storage::ExperimentProgress& progress = experiments.begin()->second;
    // Created outside the flow it read "complete" with 0 expected runs from the start, so a
    // run killed halfway would have looked complete too.
    QCOMPARE(progress.expected_points, std::uint64_t{2});
    QCOMPARE(progress.stored_points, std::uint64_t{2});
    QVERIFY(progress.complete);
  }

  void runsListMarksRunsOfAnIncompleteExperiment() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString db = dir.filePath(QStringLiteral("runs.db"));
    {
      storage::RunStore store(db.toStdString());
      // Interrupted: 1 of 3 runs stored.
      const storage::ExperimentId cut =
          storage::begin_experiment(store, "cut", nlohmann::json::object(), 3);
      storage::RunRecord record;
      record.name = "cut-a";
      record.experiment = cut;
      const storage::RunId run = store.begin_run(record);
      store.append_events(run, test::wavyTrace(200, 1, false));
      store.finish_run(run, storage::RunStatus::ok);
      // Whole: 1 of 1.
      const storage::ExperimentId whole =
          storage::begin_experiment(store, "whole", nlohmann::json::object(), 1);
      record.name = "whole-a";
      record.experiment = whole;
      const storage::RunId other = store.begin_run(record);
      store.append_events(other, test::wavyTrace(200, 2, false));
      store.finish_run(other, storage::RunStatus::ok);
      storage::finish_experiment(store, whole);
    }
    MainWindow window;
    QVERIFY(window.openDatabase(db));
    const RunsModel* model = window.runsBrowser()->model();
    QCOMPARE(model->rowCount(), 2);
    const auto outcome = [&](const char* name, int role) {
      for (int row = 0; row < model->rowCount(); ++row)
        if (model->runAt(row)->name == name)
          return model->data(model->index(row, RunsModel::StatusColumn), role).toString();
      return QString();
    };
    QCOMPARE(outcome("cut-a", Qt::DisplayRole),
             QStringLiteral("ok · experiment incomplete (1 of 3)"));
    QVERIFY(outcome("cut-a", Qt::ToolTipRole).contains(QStringLiteral("1 of its 3 runs")));
    QCOMPARE(outcome("whole-a", Qt::DisplayRole), QStringLiteral("ok"));
    QVERIFY(!outcome("whole-a", Qt::ToolTipRole).contains(QStringLiteral("incomplete")));
    // The filter finds them by the word.
    window.runsBrowser()->filterModel()->setFilterWords(QStringLiteral("incomplete"));
    QCOMPARE(window.runsBrowser()->filterModel()->rowCount(), 1);
  }
};

QTEST_MAIN(TestExperimentStatus)
#include "tst_experiment_status.moc"
