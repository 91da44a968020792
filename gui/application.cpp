#include "gui/application.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QSettings>
#include <QTimer>
#include <cstdio>

#include "engine/core/error.h"
#include "fragscope/version.h"
#include "gui/compare_page.h"
#include "gui/main_window.h"
#include "gui/report.h"
#include "gui/run_data.h"
#include "gui/runs_browser.h"
#include "gui/segment_map_page.h"
#include "gui/theme.h"
#include "gui/timeline_page.h"
#include "storage/db/data_location.h"
#include "storage/db/run_list.h"

static void initResources() {
  Q_INIT_RESOURCE(resources);
}

namespace fragscope::gui {

namespace {
constexpr int kExitBadInput = 2;

int fail(const QString& message) {
  std::fprintf(stderr, "fragscope: %s\n", message.toLocal8Bit().constData());
  return kExitBadInput;
}

// Waits until the window has loaded what it shows (no job running for a little while), then
// grabs it. Screenshots of half-loaded pages would show spinners, not data.
int takeScreenshot(MainWindow& window, const QString& path, int patienceMs) {
  QElapsedTimer waited;
  waited.start();
  int quietTicks = 0;
  QTimer poll;
  int result = 0;
  QEventLoop loop;
  QObject::connect(&poll, &QTimer::timeout, &loop, [&] {
    quietTicks = window.busy() ? 0 : quietTicks + 1;
    if (quietTicks >= 6 || waited.elapsed() > patienceMs) {
      poll.stop();
      if (waited.elapsed() > patienceMs)
        std::fprintf(stderr, "fragscope: still loading after %d s; taking the screenshot anyway\n",
                     patienceMs / 1000);
      const QPixmap shot = window.grab();
      if (!shot.save(path))
        result = fail(QObject::tr("cannot write the screenshot %1").arg(path));
      loop.quit();
    }
  });
  poll.start(50);
  loop.exec();
  return result;
}
}  // namespace

std::optional<std::vector<storage::RunId>> parseRunList(const QString& text, QString* error) {
  try {
    return storage::parse_run_list(text.toStdString());
  } catch (const InputError& e) {
    if (error)
      *error = QString::fromStdString(e.what());
    return std::nullopt;
  }
}

void initializeGuiLibrary() {
  initResources();
  qRegisterMetaType<storage::RunId>();
  qRegisterMetaType<std::vector<storage::RunId>>();
  qRegisterMetaType<TimelineSlice>();
  qRegisterMetaType<RunOverview>();
  qRegisterMetaType<SegmentSnapshotAt>();
  QCoreApplication::setOrganizationName(QStringLiteral("FragScope"));
  QCoreApplication::setOrganizationDomain(QStringLiteral("fragscope.github.io"));
  QCoreApplication::setApplicationName(QStringLiteral("FragScope"));
  QCoreApplication::setApplicationVersion(QString::fromLatin1(kVersion));
  QGuiApplication::setDesktopFileName(QStringLiteral("io.github.fragscope.FragScope"));
}

namespace {
// The command line, parsed twice: once under a QCoreApplication (so --help, --version and bad
// options answer without a display), then under the QApplication the window needs.
struct CommandLine {
  QCommandLineParser parser;
  QCommandLineOption db{QStringLiteral("db"), QObject::tr("Database to open."),
                        QStringLiteral("FILE")};
  QCommandLineOption report{QStringLiteral("report"),
                            QObject::tr("Write a report (.html or .pdf) and exit."),
                            QStringLiteral("OUT")};
  QCommandLineOption runs{QStringLiteral("runs"), QObject::tr("Runs for --report, e.g. 3,7."),
                          QStringLiteral("A,B")};
  QCommandLineOption screenshot{QStringLiteral("screenshot"),
                                QObject::tr("Render the window to a PNG and exit."),
                                QStringLiteral("OUT")};
  QCommandLineOption run{QStringLiteral("run"), QObject::tr("Run to show."), QStringLiteral("ID")};
  QCommandLineOption compare{QStringLiteral("compare"), QObject::tr("Runs to compare."),
                             QStringLiteral("A,B")};
  QCommandLineOption page{
      QStringLiteral("page"),
      QObject::tr("Page to show: timeline, segments, active-memory, segment-timeline, summary, "
                  "postmortem, compare, designer."),
      QStringLiteral("NAME")};
  QCommandLineOption size{QStringLiteral("size"), QObject::tr("Window size for --screenshot."),
                          QStringLiteral("WxH"), QStringLiteral("1600x1000")};
  QCommandLineOption dark{QStringLiteral("dark"), QObject::tr("Use the dark theme.")};
  QCommandLineOption event{QStringLiteral("event"),
                           QObject::tr("With --run: put the cursor after this many events."),
                           QStringLiteral("N")};
  QCommandLineOption block{
      QStringLiteral("block"),
      QObject::tr("With --run: select the live block at this address (0x...) in the segment map "
                  "and on the Active Memory page and show its stack, or \"largest\" (the "
                  "largest live block with a recorded stack)."),
      QStringLiteral("ADDR")};
  // Last: the structured binding in runApplication names the members in declaration order.
  QCommandLineOption caseStudy{
      QStringLiteral("case-study"),
      QObject::tr("Open the bundled case study's two stories on the Compare page (running it "
                  "first when the database lacks it).")};

  CommandLine() {
    parser.setApplicationDescription(QObject::tr("FragScope: CUDA memory fragmentation workbench"));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOptions(
        {db, report, runs, screenshot, run, compare, page, size, dark, event, block, caseStudy});
    parser.addPositionalArgument(QStringLiteral("snapshots"),
                                 QObject::tr("PyTorch memory snapshots to import."),
                                 QStringLiteral("[FILE...]"));
  }
};

bool haveDisplay() {
  return !qEnvironmentVariableIsEmpty("DISPLAY") ||
         !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") ||
         !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
}
}  // namespace

int runApplication(int argc, char** argv) {
  bool batch = false;
  {
    // --help, --version and option errors exit here, before any window system is needed.
    QCoreApplication core(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("FragScope"));
    QCoreApplication::setApplicationVersion(QString::fromLatin1(kVersion));
    CommandLine early;
    early.parser.process(core);
    batch = early.parser.isSet(early.report) || early.parser.isSet(early.screenshot);
  }
  // A report or a screenshot needs no screen: without one, render offscreen.
  if (batch && !haveDisplay())
    qputenv("QT_QPA_PLATFORM", "offscreen");

  QApplication app(argc, argv);
  initializeGuiLibrary();

  CommandLine commandLine;
  QCommandLineParser& parser = commandLine.parser;
  const auto& [unusedParser, db, report, runs, screenshot, run, compare, page, size, dark, event,
               block, caseStudy] = commandLine;
  parser.process(app);

  const QString databasePath = parser.isSet(db)
                                   ? parser.value(db)
                                   : QString::fromStdString(storage::default_database_path());

  if (parser.isSet(report)) {
    if (!QFileInfo::exists(databasePath))
      return fail(QObject::tr("%1: no such database").arg(databasePath));
    QString error;
    const auto ids = parseRunList(parser.value(runs), &error);
    if (!ids)
      return fail(QObject::tr("--runs: %1").arg(error));
    if (!exportReport(databasePath, *ids, parser.value(report), &error))
      return fail(error);
    return 0;
  }

  applyTheme(parser.isSet(dark) ||
             (!batch && QSettings().value(QStringLiteral("ui/dark_theme")).toBool()));
  MainWindow window;
  if (batch) {
    const QStringList dims = parser.value(size).split(QLatin1Char('x'));
    const int width = dims.size() == 2 ? dims[0].toInt() : 0;
    const int height = dims.size() == 2 ? dims[1].toInt() : 0;
    if (width < 200 || height < 200)
      return fail(QObject::tr("--size: expected WIDTHxHEIGHT like 1600x1000, got %1")
                      .arg(parser.value(size)));
    window.resize(width, height);
  }
  if (!window.openDatabase(databasePath))
    return fail(QObject::tr("cannot open the database %1").arg(databasePath));
  window.show();
  if (!parser.positionalArguments().isEmpty())
    window.importFiles(parser.positionalArguments());
  if (parser.isSet(run)) {
    QString error;
    const auto ids = parseRunList(parser.value(run), &error);
    if (!ids || ids->size() != 1)
      return fail(QObject::tr("--run: %1").arg(ids ? QObject::tr("one run id expected") : error));
    window.runsBrowser()->selectRuns(*ids);
    std::optional<std::uint64_t> at;
    if (parser.isSet(event)) {
      bool ok = false;
      at = parser.value(event).toULongLong(&ok);
      if (!ok)
        return fail(
            QObject::tr("--event: expected an event count, got %1").arg(parser.value(event)));
    }
    std::optional<std::uint64_t> addr;
    if (parser.isSet(block)) {
      const QString text = parser.value(block);
      bool ok = text == QLatin1String("largest");
      addr = ok ? 0 : text.toULongLong(&ok, 0);
      if (!ok)
        return fail(QObject::tr("--block: expected an address like 0x7f0000000000 or \"largest\", "
                                "got %1")
                        .arg(text));
    }
    window.showRunAt(ids->front(), at, addr);
  }
  if (parser.isSet(compare)) {
    QString error;
    const auto ids = parseRunList(parser.value(compare), &error);
    if (!ids)
      return fail(QObject::tr("--compare: %1").arg(error));
    window.runsBrowser()->selectRuns(*ids);
    window.compareRuns(*ids);
  }
  if (parser.isSet(caseStudy) && !window.openCaseStudy())
    return fail(QObject::tr("cannot open the case study"));
  if (parser.isSet(page) && !window.showPage(parser.value(page)))
    return fail(
        QObject::tr(
            "--page: unknown page \"%1\" (timeline, segments, summary, postmortem, compare, "
            "designer)")
            .arg(parser.value(page)));
  if (batch)
    // Running the case study's four simulations and comparing them takes a while.
    return takeScreenshot(window, parser.value(screenshot),
                          parser.isSet(caseStudy) ? 600000 : 60000);
  return app.exec();
}

}  // namespace fragscope::gui
