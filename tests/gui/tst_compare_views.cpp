// The Compare page as a user of a sweep reads it: runs aligned by optimizer step and by time, OOMs
// marked, the memory limit drawn, what differs between the runs (workload and allocator) listed,
// every metric of `fragscope-cli compare`, a segment map at each run's peak, and nine runs that
// stay apart (colours, names with their ids).
#include <QLabel>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTest>
#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "gui/application.h"
#include "gui/compare_page.h"
#include "gui/compare_views.h"
#include "gui/format.h"
#include "gui/plot_style.h"
#include "gui/segment_map_page.h"
#include "gui_test_util.h"
#include "storage/db/simulated_run.h"
#include "usecases/compare.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {

// A small GPT at two micro-batches, the larger one under a cap it cannot fit, and the smaller
// with gradient checkpointing and expandable segments: what a sweep's runs differ in.
nlohmann::json sweepExperiment() {
  return nlohmann::json::parse(R"({
    "name": "compare-views",
    "device": {"preset": "A100-40GB"},
    "allocator": {"alloc_conf": ""},
    "model": {"kind": "gpt", "layers": 2, "hidden": 256, "heads": 4, "ffn_mult": 4, "vocab": 4096},
    "training": {"batch_size": 4, "steps": 3, "grad_accum": 1, "precision": "bf16-autocast",
                 "seq_len": {"kind": "fixed", "value": 256}, "optimizer": "adamw"},
    "variants": [
      {"name": "bs4"},
      {"name": "bs2-ckpt-expandable",
       "set": {"training.batch_size": 2, "training.grad_accum": 2,
               "training.checkpointing": "blocks",
               "allocator.alloc_conf": "expandable_segments:True"}},
      {"name": "bs16-capped",
       "set": {"training.batch_size": 16, "device.per_process_memory_bytes": 400000000}}
    ]
  })");
}

double graphColorDistance(const QColor& a, const QColor& b) {
  const double dr = a.redF() - b.redF(), dg = a.greenF() - b.greenF(), db = a.blueF() - b.blueF();
  return std::sqrt(dr * dr + dg * dg + db * db);
}

ComparedRun handRun(std::int64_t id, const std::string& name, std::uint64_t events) {
  ComparedRun run;
  run.record.id = storage::RunId{id};
  run.record.name = name;
  run.record.event_count = events;
  return run;
}

}  // namespace

class TestCompareViews : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("sweep.db"));
    storage::RunStore store(m_db.toStdString());
    const nlohmann::json document = sweepExperiment();
    const workload::Experiment experiment = workload::parse_experiment(document, "test");
    const storage::ExperimentId id = store.create_experiment(experiment.name, document);
    for (const workload::ExperimentPoint& point : experiment.points)
      m_runs.push_back(
          storage::store_simulated_run(store, id, point, workload::run_point(point, true)));
    QCOMPARE(m_runs.size(), 3u);
    QCOMPARE(store.run(m_runs[2]).status, storage::RunStatus::oom);
    QCOMPARE(store.run(m_runs[0]).status, storage::RunStatus::ok);
  }

  // Step k + the share of its events gone by; setup before step 0 is [-1, 0); a run that stopped
  // mid-step goes on at its last step's length. A recording places by its step end times.
  void stepCoordinates() {
    ComparedRun run = handRun(1, "a", 600);
    run.stepFirstEvents = {100, 300, 500};
    QCOMPARE(*compareKey(run, CompareAxis::steps, 300, 0), 1.0);
    QCOMPARE(*compareKey(run, CompareAxis::steps, 400, 0), 1.5);
    QCOMPARE(*compareKey(run, CompareAxis::steps, 50, 0), -0.5);
    QCOMPARE(*compareKey(run, CompareAxis::steps, 550, 0), 2.25);
    QCOMPARE(*compareKey(run, CompareAxis::share, 300, 0), 50.0);
    QVERIFY(!compareKey(run, CompareAxis::time, 300, 0));
    QVERIFY(axisGap(run, CompareAxis::time).contains(QStringLiteral("no timestamps")));

    ComparedRun recorded = handRun(2, "b", 1000);
    recorded.firstTimeUs = 1'000'000;
    recorded.stepEndsUs = {2'000'000, 4'000'000};
    QCOMPARE(*compareKey(recorded, CompareAxis::steps, 10, 3'000'000), 1.5);
    QCOMPARE(*compareKey(recorded, CompareAxis::time, 10, 3'000'000), 2.0);
    QVERIFY(axisGap(recorded, CompareAxis::steps).isEmpty());

    ComparedRun neither = handRun(3, "c", 10);
    QVERIFY(!compareKey(neither, CompareAxis::steps, 5, 0));
    QVERIFY(axisGap(neither, CompareAxis::steps).contains(QStringLiteral("no optimizer steps")));
  }

  // Runs of different batch sizes open aligned by optimizer step: every run's curve spans its
  // steps (the OOM run ends inside one), the OOM is a cross at its event, the cap a dotted line.
  void sweepOpensAlignedByStepWithOomAndCap() {
    ComparePage page;
    page.resize(1200, 800);
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &ComparePage::dataReady);
    page.setRuns(m_runs);
    QVERIFY(ready.wait(60000));
    QCOMPARE(page.overlayAxis(), static_cast<int>(CompareAxis::steps));
    QCOMPARE(page.reservedGraphs().size(), 3u);
    const auto lastKey = [](const QCPGraph* graph) { return (graph->data()->constEnd() - 1)->key; };
    for (std::size_t i = 0; i < 2; ++i) {
      QVERIFY(page.reservedGraphs()[i]);
      // Three steps completed: the curve ends past step 2's start (the teardown after the last
      // step continues at that step's pace), not at the run's event count.
      QVERIFY2(lastKey(page.reservedGraphs()[i]) > 2.0 && lastKey(page.reservedGraphs()[i]) < 4.0,
               qPrintable(QString::number(lastKey(page.reservedGraphs()[i]))));
      QVERIFY(!page.oomGraphs()[i]);
    }
    const ComparedRun& capped = page.data().runs[2];
    QCOMPARE(capped.oomEvents.size(), 1u);
    QVERIFY(page.oomGraphs()[2]);
    QCOMPARE(page.oomGraphs()[2]->dataCount(), 1);
    const double oomKey = page.oomGraphs()[2]->data()->constBegin()->key;
    QCOMPARE(oomKey, *compareKey(capped, CompareAxis::steps, capped.oomEvents[0], 0));
    // The cross sits in the step the run failed in.
    const int oomStep = capped.record.summary["oom"]["step"].get<int>();
    QVERIFY2(oomKey >= oomStep && oomKey < oomStep + 1, qPrintable(QString::number(oomKey)));
    // Two limits: the A100's 39 GiB and the 400 MB cap, each a line named as PyTorch says it.
    QCOMPARE(page.limitGraphs().size(), 2u);
    bool capShown = false;
    for (const QCPGraph* line : page.limitGraphs())
      if (line->data()->constBegin()->value == 400000000.0) {
        capShown = true;
        QVERIFY(line->name().contains(QStringLiteral("allowed")));
        QVERIFY(line->name().contains(QStringLiteral("bs16-capped")));
      }
    QVERIFY(capShown);
    // The y axis fits the runs and the near cap; the device's 39 GiB is named, not drawn.
    QVERIFY(page.overlayPlot()->yAxis->range().upper < 1e9);
    for (const QCPGraph* line : page.limitGraphs())
      QCOMPARE(line->name().contains(QStringLiteral("above the plot")),
               line->data()->constBegin()->value > 1e9);
    QVERIFY(page.axisNote()->text().isEmpty());

    // By time: simulated runs have no clock, and the page says so instead of drawing nothing.
    page.overlayAxisChoice()->setCurrentIndex(static_cast<int>(CompareAxis::time));
    QVERIFY(page.axisNote()->text().contains(QStringLiteral("no timestamps")));
    QVERIFY(!page.reservedGraphs()[0]);
    // By event index every run is drawn, and the OOM cross sits at its event.
    page.overlayAxisChoice()->setCurrentIndex(static_cast<int>(CompareAxis::events));
    QCOMPARE(page.oomGraphs()[2]->data()->constBegin()->key, double(capped.oomEvents[0]));
  }

  // "What differs" names the workload changes (batch, accumulation, checkpointing) and the
  // allocator setting, and leaves what is equal unmarked.
  void whatDiffersListsWorkloadAndAllocator() {
    ComparePage page;
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &ComparePage::dataReady);
    page.setRuns(m_runs);
    QVERIFY(ready.wait(60000));
    const SettingsModel* model = page.settingsModel();
    const auto value = [&](const QString& setting, int run) {
      const int row = model->rowOf(setting);
      return row < 0 ? QStringLiteral("<missing %1>").arg(setting)
                     : model->index(row, run).data().toString();
    };
    const auto differs = [&](const QString& setting, int run) {
      return model->index(model->rowOf(setting), run).data(SettingsModel::DiffersRole).toBool();
    };
    QCOMPARE(value(QStringLiteral("Micro-batch"), 0), QStringLiteral("4"));
    QCOMPARE(value(QStringLiteral("Micro-batch"), 1), QStringLiteral("2"));
    QCOMPARE(value(QStringLiteral("Micro-batch"), 2), QStringLiteral("16"));
    QVERIFY(differs(QStringLiteral("Micro-batch"), 1));
    QCOMPARE(value(QStringLiteral("Gradient accumulation"), 0), QStringLiteral("1"));
    QCOMPARE(value(QStringLiteral("Gradient accumulation"), 1), QStringLiteral("2"));
    QCOMPARE(value(QStringLiteral("Activation checkpointing"), 0), QStringLiteral("none"));
    QCOMPARE(value(QStringLiteral("Activation checkpointing"), 1), QStringLiteral("blocks"));
    QCOMPARE(value(QStringLiteral("torch.compile"), 1), QStringLiteral("no"));
    QVERIFY(!differs(QStringLiteral("torch.compile"), 1));
    QVERIFY(!differs(QStringLiteral("Sequence length"), 2));
    QCOMPARE(value(QStringLiteral("Sequence length"), 0), QStringLiteral("256"));
    QCOMPARE(value(QStringLiteral("expandable_segments"), 1), QStringLiteral("True"));
    QCOMPARE(value(QStringLiteral("expandable_segments"), 0), QStringLiteral("default"));
    QVERIFY(differs(QStringLiteral("PYTORCH_CUDA_ALLOC_CONF"), 1));
    QVERIFY(differs(QStringLiteral("Memory limit"), 2));
    QVERIFY(!differs(QStringLiteral("Memory limit"), 1));
    // Headers carry the run ids: two runs of one name stay apart.
    QVERIFY(model->headerData(0, Qt::Horizontal).toString().startsWith(QStringLiteral("#")));
  }

  // An option with a bracketed list is one setting: the allocator's parser reads alloc_conf (a
  // split at every ',' made "roundup_power2_divisions:[256:1,>:2]" two settings, one named ">").
  void allocatorSettingsAreReadByTheParser() {
    ComparisonData data;
    data.runs.push_back(handRun(1, "bracketed", 10));
    data.runs.push_back(handRun(2, "default", 10));
    data.runs[0].record.alloc_conf =
        "roundup_power2_divisions:[256:1,>:2],expandable_segments:True";
    const std::vector<SettingRow> rows = settingRows(data);
    const auto row = [&](const QString& setting) -> const SettingRow* {
      for (const SettingRow& r : rows)
        if (r.group == QStringLiteral("Allocator") && r.setting == setting)
          return &r;
      return nullptr;
    };
    QVERIFY(row(QStringLiteral(">")) == nullptr);
    const SettingRow* roundup = row(QStringLiteral("roundup_power2_divisions"));
    QVERIFY(roundup != nullptr);
    QVERIFY2(roundup->values[0].startsWith(QLatin1Char('[')) &&
                 roundup->values[0].endsWith(QLatin1Char(']')),
             qPrintable(roundup->values[0]));
    QCOMPARE(roundup->values[1], QStringLiteral("default"));
    QVERIFY(roundup->differs);
    QVERIFY(row(QStringLiteral("expandable_segments")) != nullptr);
    QCOMPARE(row(QStringLiteral("expandable_segments"))->values[0], QStringLiteral("True"));
  }

  // An import's recorded allocator_settings are the config it ran under, read as every analysis
  // reads them (storage::allocator_config_of) and named as alloc_conf names them: a recording and
  // a simulated run of the same settings show the same rows, and a recorded value that overrides
  // the recorded string wins.
  void recordedAllocatorSettingsAreTheRunsConfig() {
    ComparisonData data;
    data.runs.push_back(handRun(1, "recorded", 10));
    data.runs.push_back(handRun(2, "simulated", 10));
    const std::string conf = "max_split_size_mb:64,roundup_power2_divisions:4";
    data.runs[0].record.alloc_conf = conf;
    data.runs[0].record.summary["allocator_settings"] = nlohmann::json::parse(R"({
      "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,roundup_power2_divisions:4",
      "max_split_size": 67108864, "garbage_collection_threshold": 0.0,
      "expandable_segments": false, "pinned_num_register_threads": 1,
      "release_lock_on_cudamalloc": false, "pinned_use_cuda_host_register": false,
      "graph_capture_record_stream_reuse": false,
      "roundup_power2_divisions": {"1": 4, "2": 4, "4": 4, "8": 4, "16": 4, "32": 4, "64": 4,
        "128": 4, "256": 4, "512": 4, "1024": 4, "2048": 4, "4096": 4, "8192": 4, "16384": 4,
        "32768": 4}})");
    data.runs[1].record.alloc_conf = conf;
    const auto allocatorRows = [&] {
      std::vector<SettingRow> out;
      for (SettingRow& r : settingRows(data))
        if (r.group == QStringLiteral("Allocator"))
          out.push_back(std::move(r));
      return out;
    };
    std::vector<SettingRow> rows = allocatorRows();
    QStringList names;
    for (const SettingRow& r : rows) {
      names << r.setting;
      QVERIFY2(!r.differs, qPrintable(r.setting + QStringLiteral(": ") + r.values[0] +
                                      QStringLiteral(" vs ") + r.values[1]));
    }
    QCOMPARE(names, (QStringList{QStringLiteral("PYTORCH_CUDA_ALLOC_CONF"),
                                 QStringLiteral("max_split_size_mb"),
                                 QStringLiteral("roundup_power2_divisions")}));
    QCOMPARE(rows[1].values[0], QStringLiteral("64"));

    data.runs[0].record.summary["allocator_settings"]["expandable_segments"] = true;
    rows = allocatorRows();
    const auto expandable = std::find_if(rows.begin(), rows.end(), [](const SettingRow& r) {
      return r.setting == QStringLiteral("expandable_segments");
    });
    QVERIFY(expandable != rows.end());
    QCOMPARE(expandable->values[0], QStringLiteral("True"));
    QCOMPARE(expandable->values[1], QStringLiteral("default"));
    QVERIFY(expandable->differs);
  }

  // Every metric `fragscope-cli compare` prints, with the use case's values, and its phases.
  void everyCliMetricIsShown() {
    ComparePage page;
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &ComparePage::dataReady);
    page.setRuns({m_runs[0], m_runs[1]});
    QVERIFY(ready.wait(60000));
    storage::RunStore store(m_db.toStdString());
    const std::vector<storage::RunId> pair{m_runs[0], m_runs[1]};
    const analysis::Comparison expected = usecases::compare_stored_runs(store, pair).comparison;
    QVERIFY(expected.metrics.size() >= 16);
    const ComparisonModel* model = page.model();
    std::map<QString, int> rows;
    for (int row = 0; row < model->rowCount(); ++row)
      rows[model->headerData(row, Qt::Vertical).toString().toLower()] = row;
    for (const analysis::MetricRow& metric : expected.metrics) {
      const QString name = QString::fromStdString(metric.name).toLower();
      QVERIFY2(rows.contains(name), qPrintable(name));
      for (std::size_t run = 0; run < metric.values.size(); ++run) {
        const double shown = model->index(rows.at(name), static_cast<int>(run))
                                 .data(ComparisonModel::ValueRole)
                                 .toDouble();
        if (metric.values[run])
          QCOMPARE(shown, *metric.values[run]);
        else
          QVERIFY(std::isnan(shown));
      }
    }
    for (const analysis::PhaseRow& phase : expected.phases)
      QVERIFY(rows.contains(QStringLiteral("phase %1 peak reserved").arg(phase.phase)));
  }

  // A segment map per run, at the event where its reserved memory peaked.
  void segmentMapsAtEachRunsPeak() {
    ComparePage page;
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &ComparePage::dataReady);
    page.setRuns(m_runs);
    QVERIFY(ready.wait(60000));
    QCOMPARE(page.peakMaps().size(), m_runs.size());
    for (std::size_t i = 0; i < m_runs.size(); ++i) {
      const ComparedRun& run = page.data().runs[i];
      QVERIFY(run.atPeak);
      QVERIFY(page.peakMaps()[i]);
      QCOMPARE(run.atPeak->eventIndex, run.profile->metrics.peak_reserved_event + 1);
      QCOMPARE(run.atPeak->summary.reserved, run.profile->metrics.peak.reserved);
      QVERIFY(!page.peakMaps()[i]->views().empty());
    }
    QCOMPARE(page.tabs()->tabText(3), QStringLiteral("Segment maps at peak"));
    // FRAGSCOPE_SCREENSHOTS=DIR keeps a picture of every tab, to look at the page as a user does.
    const QString shots = qEnvironmentVariable("FRAGSCOPE_SCREENSHOTS");
    if (!shots.isEmpty()) {
      page.resize(1400, 900);
      page.show();
      for (int tab = 0; tab < page.tabs()->count(); ++tab) {
        page.tabs()->setCurrentIndex(tab);
        QTest::qWait(50);
        QVERIFY(page.grab().save(QStringLiteral("%1/compare-tab%2.png").arg(shots).arg(tab)));
      }
    }
  }

  // Twelve run colours, far apart and none the OOM red; nine runs of one name are drawn in nine
  // colours and named by id.
  void nineRunsStayApart() {
    for (int a = 0; a < 12; ++a) {
      QVERIFY(graphColorDistance(colors::run(a), colors::oom) > 0.25);
      for (int b = a + 1; b < 12; ++b)
        QVERIFY2(graphColorDistance(colors::run(a), colors::run(b)) > 0.2,
                 qPrintable(QStringLiteral("%1 vs %2").arg(a).arg(b)));
    }
    const QString db = m_dir.filePath(QStringLiteral("nine.db"));
    std::vector<storage::RunId> runs;
    {
      storage::RunStore store(db.toStdString());
      for (std::uint32_t i = 0; i < 9; ++i)
        runs.push_back(test::addRun(store, "same-name", test::wavyTrace(2000, 90 + i, false)));
    }
    ComparePage page;
    page.setDatabase(db);
    QSignalSpy ready(&page, &ComparePage::dataReady);
    page.setRuns(runs);
    QVERIFY(ready.wait(60000));
    std::set<QRgb> pens;
    std::set<QString> names;
    for (const QCPGraph* graph : page.reservedGraphs()) {
      QVERIFY(graph);
      pens.insert(graph->pen().color().rgb());
      names.insert(graph->name());
    }
    QCOMPARE(pens.size(), 9u);
    QCOMPARE(names.size(), 9u);
    // Only the reserved curves and the limit are in the legend: nine entries, not eighteen.
    QCOMPARE(page.overlayPlot()->legend->itemCount(), 10);
    // Recorded runs have a clock: by time they are all drawn.
    page.overlayAxisChoice()->setCurrentIndex(static_cast<int>(CompareAxis::time));
    QVERIFY(page.axisNote()->text().isEmpty());
    for (const QCPGraph* graph : page.reservedGraphs())
      QVERIFY(graph);
  }

 private:
  QTemporaryDir m_dir;
  QString m_db;
  std::vector<storage::RunId> m_runs;
};

QTEST_MAIN(TestCompareViews)
#include "tst_compare_views.moc"
