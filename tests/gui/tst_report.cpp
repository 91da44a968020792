// Reports (HTML with the peak numbers and embedded plots, PDF with pages) and the batch modes of
// the real `fragscope` binary: --report and --screenshot.
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QTest>

#include "engine/snapshot/snapshot.h"
#include "gui/application.h"
#include "gui/format.h"
#include "gui/report.h"
#include "gui/runs_model.h"
#include "gui_test_util.h"
#include "storage/db/snapshot_import.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestReport : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::RunId m_ok, m_oom, m_real;

  static QByteArray readAll(const QString& path) {
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
  }

  // FRAGSCOPE_TEST_ARTIFACTS=DIR keeps the screenshots and reports for a human to look at.
  static void keepArtifact(const QString& path) {
    const QString dir = qEnvironmentVariable("FRAGSCOPE_TEST_ARTIFACTS");
    if (!dir.isEmpty()) {
      const QString target = QDir(dir).filePath(QFileInfo(path).fileName());
      QFile::remove(target);
      QFile::copy(path, target);
    }
  }

  struct Result {
    int exitCode = -1;
    QString stderrText;
  };
  Result runGui(const QStringList& arguments) {
    QProcess process;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), m_dir.filePath(QStringLiteral("config")));
    env.insert(QStringLiteral("XDG_DATA_HOME"), m_dir.filePath(QStringLiteral("data")));
    process.setProcessEnvironment(env);
    process.start(QStringLiteral(FRAGSCOPE_GUI_BINARY), arguments);
    if (!process.waitForFinished(120000))
      return {};
    return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
            QString::fromLocal8Bit(process.readAllStandardError())};
  }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.db"));
    storage::RunStore store(m_db.toStdString());
    m_ok = test::addRun(store, "steady", test::wavyTrace(8000, 4, false));
    m_oom = test::addRun(store, "capped", test::wavyTrace(6000, 5, true), "max_split_size_mb:64",
                         storage::RunStatus::oom);
    storage::ImportOptions options;
    options.name = "gpt_oom_cap";
    m_real =
        storage::import_snapshot(
            store, snapshot::read_snapshot(FRAGSCOPE_FIXTURES "/gpt_oom_cap.pickle.gz"), options)
            .run;
  }

  void htmlContainsThePeaks() {
    const QString path = m_dir.filePath(QStringLiteral("report.html"));
    QString error;
    QVERIFY2(exportReport(m_db, {m_ok, m_oom}, path, &error), qPrintable(error));
    const QString html = QString::fromUtf8(readAll(path));
    storage::RunStore store(m_db.toStdString());
    for (storage::RunId id : {m_ok, m_oom}) {
      const storage::RunRecord run = store.run(id);
      const QString peak = formatBytes(static_cast<double>(summaryPeak(run, "reserved")));
      QVERIFY2(html.contains(peak), qPrintable(peak));
      QVERIFY(html.contains(formatBytes(static_cast<double>(summaryPeak(run, "allocated")))));
      QVERIFY(html.contains(QString::fromStdString(run.name)));
    }
    // Self-contained: plots embedded, no external references.
    QCOMPARE(html.count(QStringLiteral("data:image/png;base64,")), 3);  // two runs + overlay
    QVERIFY(!html.contains(QStringLiteral("src=\"plot")));
    QVERIFY(html.contains(QStringLiteral("Out-of-memory post-mortem")));
    // A trace the allocator's layout rules cannot explain still reports, saying why.
    QVERIFY(html.contains(QStringLiteral("The engine could not analyse this run")));
    QVERIFY(html.contains(QStringLiteral("max_split_size_mb:64")));  // config mismatch warning
    QVERIFY(html.contains(QStringLiteral("PyTorch")) || html.contains(QStringLiteral("Device")));
    keepArtifact(path);
  }

  void midRunTracesAreMarked() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("midrun.db"));
    storage::RunId whole;
    storage::RunId midRun;
    {
      storage::RunStore store(db.toStdString());
      whole = test::addRun(store, "whole", test::wavyTrace(3000, 6, false));
      midRun = test::addRun(store, "tail", test::wavyTrace(3000, 7, false));
      nlohmann::json summary = store.run(midRun).summary;
      summary["truncated"] = true;
      store.update_summary(midRun, summary);
    }
    const QString path = dir.filePath(QStringLiteral("midrun.html"));
    QString error;
    QVERIFY2(exportReport(db, {whole, midRun}, path, &error), qPrintable(error));
    const QString html = QString::fromUtf8(readAll(path));
    QCOMPARE(html.count(QStringLiteral("Mid-run trace:")), 1);
    // The note sits under the mid-run run's heading, not the whole run's.
    QVERIFY(html.indexOf(QStringLiteral("Mid-run trace:")) >
            html.indexOf(QStringLiteral(": tail</h2>")));
    QVERIFY(html.contains(QStringLiteral("ok · mid-run")));
  }

  // A real recording's OOM: the report carries the engine's verdict and what-if table, exactly as
  // the post-mortem page computes them.
  void htmlCarriesTheEnginesPostMortem() {
    const QString path = m_dir.filePath(QStringLiteral("real.html"));
    QString error;
    QVERIFY2(exportReport(m_db, {m_real}, path, &error), qPrintable(error));
    const QString html = QString::fromUtf8(readAll(path));
    const PostMortemData postMortem = loadPostMortem(m_db, m_real);
    QCOMPARE(postMortem.postMortems.size(), std::size_t{1});
    const auto& oom = postMortem.postMortems.front();
    QVERIFY(html.contains(QString::fromStdString(oom.pytorch_figures()).toHtmlEscaped()));
    QVERIFY(!oom.evidence.empty());
    for (const auto& sentence : oom.evidence)
      QVERIFY(html.contains(QString::fromStdString(sentence).toHtmlEscaped()));
    QVERIFY(postMortem.whatIf.has_value());
    QVERIFY(postMortem.whatIf->rows.size() > 1);
    for (const auto& row : postMortem.whatIf->rows)
      QVERIFY2(html.contains(QString::fromStdString(row.name).toHtmlEscaped()), row.name.c_str());
    QVERIFY(!html.contains(QStringLiteral("could not analyse")));
  }

  void pdfHasPages() {
    const QString path = m_dir.filePath(QStringLiteral("report.pdf"));
    QString error;
    QVERIFY2(exportReport(m_db, {m_ok, m_oom}, path, &error), qPrintable(error));
    const QByteArray pdf = readAll(path);
    QVERIFY(pdf.startsWith("%PDF-"));
    const auto pages = pdf.count(QByteArrayLiteral("/Type /Page\n")) +
                       pdf.count(QByteArrayLiteral("/Type /Page\r")) +
                       pdf.count(QByteArrayLiteral("/Type /Page ")) +
                       pdf.count(QByteArrayLiteral("/Type /Page/")) +
                       pdf.count(QByteArrayLiteral("/Type /Page>"));
    QVERIFY2(pages >= 2, qPrintable(QString::number(pages)));
    QVERIFY(pdf.contains("/Subtype /Image"));
    keepArtifact(path);
  }

  void badReportRequestsSayWhy() {
    QString error;
    QVERIFY(!exportReport(m_db, {m_ok}, m_dir.filePath(QStringLiteral("report.docx")), &error));
    QVERIFY(error.contains(QStringLiteral("report.docx")));
    QVERIFY(!exportReport(m_db, {storage::RunId(999)}, m_dir.filePath(QStringLiteral("x.html")),
                          &error));
    QVERIFY2(error.contains(QStringLiteral("999")), qPrintable(error));
  }

  void commandLineReport() {
    const QString out = m_dir.filePath(QStringLiteral("cli.html"));
    const Result ok = runGui({QStringLiteral("--report"), out, QStringLiteral("--db"), m_db,
                              QStringLiteral("--runs"),
                              QStringLiteral("%1,%2").arg(m_ok.value).arg(m_oom.value)});
    QVERIFY2(ok.exitCode == 0, qPrintable(ok.stderrText));
    QVERIFY(readAll(out).contains("capped"));
    const Result pdf = runGui({QStringLiteral("--report"),
                               m_dir.filePath(QStringLiteral("cli.pdf")), QStringLiteral("--db"),
                               m_db, QStringLiteral("--runs"), QString::number(m_oom.value)});
    QVERIFY2(pdf.exitCode == 0, qPrintable(pdf.stderrText));
    QVERIFY(readAll(m_dir.filePath(QStringLiteral("cli.pdf"))).startsWith("%PDF-"));

    const Result badRuns = runGui({QStringLiteral("--report"), out, QStringLiteral("--db"), m_db,
                                   QStringLiteral("--runs"), QStringLiteral("1,two")});
    QCOMPARE(badRuns.exitCode, 2);
    QVERIFY2(badRuns.stderrText.contains(QStringLiteral("\"two\"")),
             qPrintable(badRuns.stderrText));
    const Result noDb = runGui({QStringLiteral("--report"), out, QStringLiteral("--db"),
                                m_dir.filePath(QStringLiteral("missing.db")),
                                QStringLiteral("--runs"), QStringLiteral("1")});
    QCOMPARE(noDb.exitCode, 2);
    QVERIFY(noDb.stderrText.contains(QStringLiteral("missing.db")));
  }

  void commandLineScreenshot() {
    const QString out = m_dir.filePath(QStringLiteral("shot.png"));
    const Result shot = runGui({QStringLiteral("--screenshot"), out, QStringLiteral("--db"), m_db,
                                QStringLiteral("--run"), QString::number(m_oom.value),
                                QStringLiteral("--size"), QStringLiteral("1200x800")});
    QVERIFY2(shot.exitCode == 0, qPrintable(shot.stderrText));
    const QImage image(out);
    QCOMPARE(image.size(), QSize(1200, 800));
    // Not a blank window: the plot and the map put many distinct colours on screen.
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); y += 7)
      for (int x = 0; x < image.width(); x += 7)
        colours.insert(image.pixel(x, y));
    QVERIFY2(colours.size() > 20, qPrintable(QString::number(colours.size())));
    keepArtifact(out);

    const Result compare =
        runGui({QStringLiteral("--screenshot"), m_dir.filePath(QStringLiteral("compare.png")),
                QStringLiteral("--db"), m_db, QStringLiteral("--compare"),
                QStringLiteral("%1,%2").arg(m_ok.value).arg(m_oom.value)});
    QVERIFY2(compare.exitCode == 0, qPrintable(compare.stderrText));
    QVERIFY(!QImage(m_dir.filePath(QStringLiteral("compare.png"))).isNull());
    keepArtifact(m_dir.filePath(QStringLiteral("compare.png")));
    const Result badPage = runGui({QStringLiteral("--screenshot"), out, QStringLiteral("--db"),
                                   m_db, QStringLiteral("--page"), QStringLiteral("nope")});
    QCOMPARE(badPage.exitCode, 2);
    QVERIFY(badPage.stderrText.contains(QStringLiteral("nope")));
  }
};

QTEST_MAIN(TestReport)
#include "tst_report.moc"
