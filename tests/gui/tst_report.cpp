// Reports (HTML with the peak numbers and embedded plots, PDF with pages) and the batch modes of
// the real `fragscope` binary: --report and --screenshot.
#include <QAbstractTextDocumentLayout>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QTest>
#include <QTextBlock>
#include <QTextDocument>
#include <set>

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
  Result runGui(const QStringList& arguments, int timeoutMs = 120000) {
    QProcess process;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), m_dir.filePath(QStringLiteral("config")));
    env.insert(QStringLiteral("XDG_DATA_HOME"), m_dir.filePath(QStringLiteral("data")));
    process.setProcessEnvironment(env);
    process.start(QStringLiteral(FRAGSCOPE_GUI_BINARY), arguments);
    if (!process.waitForFinished(timeoutMs))
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
    // As `fragscope-cli import` does: the recording's stats carry its 6 GiB per-process cap.
    options.recorded_stats =
        storage::read_companion_stats(FRAGSCOPE_FIXTURES "/gpt_oom_cap.pickle.gz");
    QVERIFY(options.recorded_stats);
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
    // Self-contained: plots embedded, no external references. Two runs' plots, the overlay and
    // a segment map per run whose layout is known.
    const ReportData data = loadReportData(m_db, {m_ok, m_oom});
    const auto maps = std::count_if(data.comparison.runs.begin(), data.comparison.runs.end(),
                                    [](const ComparedRun& run) { return run.atPeak.has_value(); });
    QCOMPARE(html.count(QStringLiteral("data:image/png;base64,")), 3 + maps);
    QVERIFY(!html.contains(QStringLiteral(".png\"")));
    QVERIFY(html.contains(QStringLiteral("Out-of-memory post-mortem")));
    // A trace the allocator's layout rules cannot explain still reports, saying why.
    QVERIFY(html.contains(QStringLiteral("The engine could not analyse this run")));
    QVERIFY(html.contains(QStringLiteral("max_split_size_mb:64")));  // config mismatch warning
    QVERIFY(html.contains(QStringLiteral("PyTorch")) || html.contains(QStringLiteral("Device")));
    keepArtifact(path);
  }

  // Each run's plot shows its OOMs (red crosses) and its memory limit (a red dotted line) in
  // the run's Compare colour; a run with neither has no red. Its segment map at the reserved peak
  // follows, and its heading carries the same colour.
  void plotsMarkOomsTheLimitAndTheSegmentMap() {
    ReportData data = loadReportData(m_db, {m_ok, m_real});
    const ReportPlots plots = renderReportPlots(data);
    QCOMPARE(plots.runs.size(), std::size_t{2});
    QVERIFY(!plots.overlay.isNull());
    plots.runs[1].save(m_dir.filePath(QStringLiteral("capped-plot.png")));
    keepArtifact(m_dir.filePath(QStringLiteral("capped-plot.png")));
    // Looks at the plot area only: the legend beside it lists the 140 GiB line as "above the
    // plot".
    const auto hasColor = [](const QImage& image, const QColor& color) {
      for (int y = 0; y < image.height(); ++y)
        for (int x = 0; x < image.width() * 7 / 10; ++x) {
          const QColor pixel = image.pixelColor(x, y);
          if (std::abs(pixel.red() - color.red()) < 12 &&
              std::abs(pixel.green() - color.green()) < 12 &&
              std::abs(pixel.blue() - color.blue()) < 12)
            return true;
        }
      return false;
    };
    QVERIFY(!hasColor(plots.runs[0], colors::oom));  // steady: no OOM, its 140 GiB far above
    QVERIFY(hasColor(plots.runs[1], colors::oom));   // gpt_oom_cap: OOM and 6 GiB allowed
    QVERIFY(hasColor(plots.overlay, colors::oom));
    for (std::size_t i = 0; i < 2; ++i) {
      QVERIFY(hasColor(plots.runs[i], colors::run(static_cast<int>(i))));
      QVERIFY(hasColor(plots.overlay, colors::run(static_cast<int>(i))));
    }
    QVERIFY(data.comparison.runs[1].atPeak);
    QVERIFY(!plots.peakMaps[1].isNull());
    QVERIFY(hasColor(plots.peakMaps[1], colors::blockAllocated));
    const QString html = reportHtml(data, plots, true);
    QVERIFY(html.contains(QStringLiteral("Segment map at the reserved peak")));
    QVERIFY(html.contains(QStringLiteral("6.00 GiB allowed")));
    QVERIFY(html.contains(QStringLiteral("color:%1\">&#9632;</span> Run %2")
                              .arg(colors::run(1).name())
                              .arg(m_real.value)));
    // One font family for the text and the plots.
    QVERIFY(html.contains(QStringLiteral("font-family:'%1'").arg(reportFont(10).family())));
  }

  // Exported from the Compare page: its story heads the report and its axis is the plots'.
  void storyAndAxisComeFromTheScope() {
    ReportData data = loadReportData(m_db, {m_ok, m_oom});
    data.story = QStringLiteral("<b>Two stories</b>");
    const QString html = reportHtml(data, ReportPlots{}, true);
    QVERIFY(html.contains(QStringLiteral("<p class=\"story\"><b>Two stories</b></p>")));
    QVERIFY(html.indexOf(QStringLiteral("Two stories")) < html.indexOf(QStringLiteral("Summary")));
    QVERIFY(html.contains(QStringLiteral("What differs")));
  }

  // In the PDF every run's section starts a page: no heading is left at the foot of a page with
  // its plot on the next.
  void pdfRunHeadingsStartTheirPages() {
    const ReportData data = loadReportData(m_db, {m_ok, m_oom, m_real});
    const ReportPlots plots = renderReportPlots(data);
    const QSizeF page(909, 1286);  // A4 at the PDF's 110 dpi
    const auto document = reportDocument(data, plots, page);
    QCOMPARE(document->defaultFont().family(), reportFont(9).family());
    int headings = 0;
    for (QTextBlock block = document->begin(); block.isValid(); block = block.next()) {
      if (block.blockFormat().headingLevel() != 2 || !block.text().contains(QStringLiteral("Run ")))
        continue;
      ++headings;
      const QRectF heading = document->documentLayout()->blockBoundingRect(block);
      const QRectF next = document->documentLayout()->blockBoundingRect(block.next());
      const auto pageOf = [&](double y) { return static_cast<int>(y / page.height()); };
      const double fromTop = heading.top() - pageOf(heading.top()) * page.height();
      QVERIFY2(fromTop < page.height() / 10, qPrintable(block.text()));
      QCOMPARE(pageOf(next.bottom()), pageOf(heading.top()));
    }
    QCOMPARE(headings, 3);
    QVERIFY(document->pageCount() >= 4);
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

  // `fragscope --case-study --screenshot` on a database without the case study runs it, then
  // waits for the Compare page to show both stories before it grabs the window (it once grabbed
  // an empty window while the simulations were still starting).
  void commandLineCaseStudy() {
    const QString db = m_dir.filePath(QStringLiteral("case-study.db"));
    const QString out = m_dir.filePath(QStringLiteral("case-study.png"));
    const Result shot = runGui(
        {QStringLiteral("--screenshot"), out, QStringLiteral("--db"), db,
         QStringLiteral("--case-study"), QStringLiteral("--size"), QStringLiteral("1400x900")},
        600000);
    QVERIFY2(shot.exitCode == 0, qPrintable(shot.stderrText));
    std::set<std::string> names;
    for (const storage::RunRecord& run : storage::RunStore(db.toStdString()).list_runs())
      names.insert(run.name);
    for (const char* variant :
         {"baseline-bs16", "mitigated", "varlen-bs6", "varlen-bs6-expandable"})
      QVERIFY2(names.count(variant), variant);
    const QImage image(out);
    QCOMPARE(image.size(), QSize(1400, 900));
    // Four runs' colours on the Compare page's plots, not the welcome page.
    for (int i = 0; i < 4; ++i) {
      const QColor color = colors::run(i);
      bool found = false;
      for (int y = 0; y < image.height() && !found; y += 2)
        for (int x = 0; x < image.width() && !found; ++x)
          found = image.pixelColor(x, y) == color;
      QVERIFY2(found, qPrintable(QStringLiteral("run %1's colour is not on screen").arg(i)));
    }
    keepArtifact(out);
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
