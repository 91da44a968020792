// GUI and CLI give the same numbers for the same runs: the Compare page's table (what the user
// reads) against `fragscope-cli compare --json` (what a script reads), on two of our recordings
// and one third-party snapshot. Both go through usecases::compare_stored_runs; this pins that
// neither front-end measures on its own again.
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
#include "storage/db/snapshot_import.h"
#include "usecases/compare.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {
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
                                      FRAGSCOPE_FIXTURES "/gpt_varlen_expandable.pickle.gz"};
    const std::string realWorld = FRAGSCOPE_SHARED_FIXTURES
        "/real-world/"
        "shreyansh26__MLSys-Experiments__model_memory_usage_profile_grad."
        "pickle.gz";
    m_haveRealWorld = QFileInfo::exists(QString::fromStdString(realWorld));
    if (m_haveRealWorld)
      paths.push_back(realWorld);
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
    QProcess cli;
    cli.start(QStringLiteral(FRAGSCOPE_CLI),
              {QStringLiteral("compare"), QStringLiteral("--db"), m_db, QStringLiteral("--runs"),
               ids.join(QLatin1Char(',')), QStringLiteral("--json"), QStringLiteral("-")});
    QVERIFY(cli.waitForFinished(120000));
    QCOMPARE(cli.exitCode(), 0);
    const auto json = nlohmann::json::parse(cli.readAllStandardOutput().toStdString());
    std::map<std::string, nlohmann::json> cliRows;
    for (const auto& row : json["metrics"])
      cliRows[row["name"].get<std::string>()] = row["values"];

    const ComparisonData data = loadComparison(m_db, m_runs, 200);
    QCOMPARE(data.runs.size(), m_runs.size());
    ComparisonModel model;
    model.resetData(data);
    const auto rows = rowsByName(model);
    const std::pair<const char*, const char*> pairs[] = {{"Peak reserved", "peak reserved"},
                                                         {"Peak allocated", "peak allocated"},
                                                         {"Peak active", "peak active"},
                                                         {"OOM events", "OOMs"}};
    for (const auto& [gui, cli] : pairs) {
      QVERIFY2(rows.contains(QString::fromLatin1(gui)), gui);
      for (std::size_t run = 0; run < m_runs.size(); ++run) {
        const double shown = model.index(rows.at(QString::fromLatin1(gui)), static_cast<int>(run))
                                 .data(ComparisonModel::ValueRole)
                                 .toDouble();
        QCOMPARE(shown, cliRows.at(cli).at(run).get<double>());
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

 private:
  QTemporaryDir m_dir;
  QString m_db;
  std::vector<storage::RunId> m_runs;
  bool m_haveRealWorld = false;
};

QTEST_MAIN(TestCompareParity)
#include "tst_compare_parity.moc"
