// GUI and CLI give the same numbers for the same runs: the Compare page's table and the
// Post-mortem page's what-if table (what the user reads) against `fragscope-cli compare --json`
// and `fragscope-cli post-mortem --json` (what a script reads), on two of our recordings, one with
// an OOM, and one third-party snapshot. Both front-ends go through usecases/; this pins that
// neither measures on its own again.
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/snapshot/snapshot.h"
#include "gui/application.h"
#include "gui/compare_page.h"
#include "gui/post_mortem_data.h"
#include "gui/post_mortem_page.h"
#include "storage/db/snapshot_import.h"
#include "usecases/compare.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {
nlohmann::json runCli(const QStringList& arguments) {
  QProcess cli;
  cli.start(QStringLiteral(FRAGSCOPE_CLI), arguments);
  if (!cli.waitForFinished(300000) || cli.exitCode() != 0) {
    qWarning("%s", cli.readAllStandardError().constData());
    return {};
  }
  return nlohmann::json::parse(cli.readAllStandardOutput().toStdString());
}

// The compare table's rows, by header.
std::map<QString, int> rowsByName(const ComparisonModel& model) {
  std::map<QString, int> rows;
  for (int row = 0; row < model.rowCount(); ++row)
    rows[model.headerData(row, Qt::Vertical).toString()] = row;
  return rows;
}
}  // namespace

class TestCompareParity : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.db"));
    storage::RunStore store(m_db.toStdString());
    std::vector<std::string> paths = {FRAGSCOPE_FIXTURES "/random_split64_round4.pickle.gz",
                                      FRAGSCOPE_FIXTURES "/gpt_varlen_expandable.pickle.gz",
                                      FRAGSCOPE_FIXTURES "/gpt_oom_cap.pickle.gz"};
    const std::string realWorld = FRAGSCOPE_SHARED_FIXTURES
        "/real-world/"
        "shreyansh26__MLSys-Experiments__model_memory_usage_profile_grad."
        "pickle.gz";
    m_haveRealWorld = QFileInfo::exists(QString::fromStdString(realWorld));
    if (m_haveRealWorld)
      paths.push_back(realWorld);
    m_paths = paths;
    for (const std::string& path : paths)
      m_runs.push_back(
          storage::import_snapshot(store, snapshot::read_snapshot(path), storage::ImportOptions{})
              .run);
  }

  void tableEqualsTheCli() {
    if (!m_haveRealWorld)
      qWarning("../shared/fixtures/real-world is absent: comparing the two recordings only");
    QStringList ids;
    for (storage::RunId run : m_runs)
      ids << QString::number(run.value);
    const auto json =
        runCli({QStringLiteral("compare"), QStringLiteral("--db"), m_db, QStringLiteral("--runs"),
                ids.join(QLatin1Char(',')), QStringLiteral("--json"), QStringLiteral("-")});
    QVERIFY(json.is_object());
    std::map<std::string, nlohmann::json> cliRows;
    for (const auto& row : json["metrics"])
      cliRows[row["name"].get<std::string>()] = row["values"];

    const ComparisonData data = loadComparison(m_db, m_runs, 200);
    QCOMPARE(data.runs.size(), m_runs.size());
    ComparisonModel model;
    model.resetData(data);
    const auto rows = rowsByName(model);
    // Every row the CLI prints is on the page, under the CLI's name, with the CLI's value.
    std::map<QString, int> byLowerName;
    for (const auto& [name, row] : rows)
      byLowerName[name.toLower()] = row;
    QVERIFY(cliRows.size() >= 16);
    for (const auto& [cli, values] : cliRows) {
      const QString name = QString::fromStdString(cli).toLower();
      QVERIFY2(byLowerName.contains(name), qPrintable(name));
      for (std::size_t run = 0; run < m_runs.size(); ++run) {
        const double shown = model.index(byLowerName.at(name), static_cast<int>(run))
                                 .data(ComparisonModel::ValueRole)
                                 .toDouble();
        if (values.at(run).is_null())
          QVERIFY2(std::isnan(shown), qPrintable(name));
        else
          QCOMPARE(shown, values.at(run).get<double>());
      }
    }
    // The runs' recorded peaks are PyTorch's counters: the measurement agrees with them.
    for (std::size_t run = 0; run < m_runs.size(); ++run) {
      const storage::RunRecord& record = data.runs[run].record;
      QCOMPARE(model.index(rows.at(QStringLiteral("Peak reserved")), static_cast<int>(run))
                   .data(ComparisonModel::ValueRole)
                   .toDouble(),
               double(record.summary["peaks"]["reserved"].get<std::int64_t>()));
    }
  }

  // "Reserved − allocated at peak reserved" reads both counters at one event, so it can never
  // exceed that event's reserved bytes and is not the difference of the two peaks when allocated
  // peaked elsewhere.
  void unusedAtPeakIsReadAtOneEvent() {
    const ComparisonData data = loadComparison(m_db, m_runs, 200);
    ComparisonModel model;
    model.resetData(data);
    const int row = rowsByName(model).at(QStringLiteral("Reserved − allocated at peak reserved"));
    for (std::size_t run = 0; run < data.runs.size(); ++run) {
      QVERIFY(data.runs[run].profile.has_value());
      const analysis::RunProfile& profile = *data.runs[run].profile;
      QVERIFY(!profile.series_only);
      const analysis::MemorySample& at = profile.metrics.at_peak_reserved;
      QCOMPARE(at.reserved, profile.metrics.peak.reserved);
      const double shown =
          model.index(row, static_cast<int>(run)).data(ComparisonModel::ValueRole).toDouble();
      QCOMPARE(shown, double(at.reserved - at.allocated));
    }
  }

  // The post-mortem page's diagnosis and what-if table against `fragscope-cli post-mortem`.
  void postMortemEqualsTheCli() {
    for (storage::RunId run : m_runs) {
      const auto json = runCli({QStringLiteral("post-mortem"), QStringLiteral("--db"), m_db,
                                QStringLiteral("--run"), QString::number(run.value),
                                QStringLiteral("--json"), QStringLiteral("-")});
      QVERIFY(json.is_object());
      const PostMortemData data = loadPostMortem(m_db, run);
      QCOMPARE(data.postMortems.size(), json["post_mortems"].size());
      for (std::size_t i = 0; i < data.postMortems.size(); ++i)
        QCOMPARE(data.postMortems[i].event_index,
                 json["post_mortems"][i]["event_index"].get<std::size_t>());
      QVERIFY(data.whatIf.has_value());
      WhatIfModel model;
      model.resetData(*data.whatIf, !data.postMortems.empty());
      const auto& rows = json["what_if"]["rows"];
      QCOMPARE(static_cast<std::size_t>(model.rowCount()), rows.size());
      QVERIFY(model.rowCount() >= 2);
      for (int row = 0; row < model.rowCount(); ++row) {
        const auto& cliRow = rows[static_cast<std::size_t>(row)];
        QCOMPARE(model.index(row, WhatIfModel::NameColumn)
                     .data(WhatIfModel::SortRole)
                     .toString()
                     .toStdString(),
                 cliRow["name"].get<std::string>());
        QCOMPARE(model.index(row, WhatIfModel::PeakReservedColumn)
                     .data(WhatIfModel::SortRole)
                     .toULongLong(),
                 cliRow["peak_reserved"].get<qulonglong>());
        QCOMPARE(model.index(row, WhatIfModel::DeviceCallsColumn)
                     .data(WhatIfModel::SortRole)
                     .toLongLong(),
                 cliRow["extra_device_calls"].get<qlonglong>());
      }
    }
  }

  // `fragscope-cli advise FILE` reads the snapshot file, the page reads the run imported from it:
  // one what-if (analysis::trace_candidates / trace_what_if_options), so the same rows, peaks and
  // verdicts. The page also tries the newest release, so the CLI is asked for it.
  void adviseOnTheFileEqualsThePage() {
    for (std::size_t i = 0; i < m_runs.size(); ++i) {
      const auto json = runCli({QStringLiteral("advise"), QString::fromStdString(m_paths[i]),
                                QStringLiteral("--what-if-releases"),
                                QString::fromStdString(kLatestTorch.to_string()),
                                QStringLiteral("--json"), QStringLiteral("-")});
      QVERIFY(json.is_object());
      const PostMortemData data = loadPostMortem(m_db, m_runs[i]);
      QVERIFY(data.whatIf.has_value());
      const auto& rows = json["what_if"]["rows"];
      QCOMPARE(data.whatIf->rows.size(), rows.size());
      QVERIFY(rows.size() >= 2);
      for (std::size_t row = 0; row < rows.size(); ++row) {
        const analysis::WhatIfRow& shown = data.whatIf->rows[row];
        QCOMPARE(shown.name, rows[row]["name"].get<std::string>());
        QCOMPARE(shown.ok, rows[row]["ok"].get<bool>());
        QCOMPARE(shown.peak_reserved, rows[row]["peak_reserved"].get<Bytes>());
        QCOMPARE(shown.segment_allocs, rows[row]["segment_allocs"].get<std::uint64_t>());
      }
    }
  }

  // Applying a what-if row stores its replay; the stored run has the row's peak.
  void mitigationRunHasTheRowsPeak() {
    const storage::RunId oomRun = m_runs[2];
    const PostMortemData data = loadPostMortem(m_db, oomRun);
    QVERIFY(!data.postMortems.empty());
    const auto fitting = data.rowsThatFit();
    QVERIFY(!fitting.empty());
    const analysis::WhatIfRow& row = *fitting.front();
    const storage::RunId created = runMitigation(m_db, oomRun, row.name);
    storage::RunStore store(m_db.toStdString());
    const storage::RunRecord record = store.run(created);
    QCOMPARE(record.status, storage::RunStatus::ok);
    QCOMPARE(record.summary["peaks"]["reserved"].get<std::int64_t>(),
             static_cast<std::int64_t>(row.peak_reserved));
    const auto cli = runCli({QStringLiteral("post-mortem"), QStringLiteral("--db"), m_db,
                             QStringLiteral("--run"), QString::number(oomRun.value),
                             QStringLiteral("--apply"), QStringLiteral("no such mitigation")});
    QVERIFY(cli.is_null());  // exit 2 with the names it has
  }

 private:
  QTemporaryDir m_dir;
  QString m_db;
  std::vector<std::string> m_paths;
  std::vector<storage::RunId> m_runs;
  bool m_haveRealWorld = false;
};

QTEST_MAIN(TestCompareParity)
#include "tst_compare_parity.moc"
