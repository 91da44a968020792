#include "gui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSaveFile>
#include <QSettings>
#include <QShortcut>
#include <QStackedWidget>
#include <QStatusBar>
#include <QToolBar>
#include <QVBoxLayout>
#include <map>

#include "engine/core/error.h"
#include "engine/workload/experiment.h"
#include "fragscope/version.h"
#include "gui/band_timeline_page.h"
#include "gui/compare_page.h"
#include "gui/designer_page.h"
#include "gui/event_history_page.h"
#include "gui/file_dialogs.h"
#include "gui/job_page.h"
#include "gui/post_mortem_page.h"
#include "gui/report.h"
#include "gui/runs_browser.h"
#include "gui/runs_model.h"
#include "gui/segment_map_page.h"
#include "gui/snapshot_import.h"
#include "gui/summary_page.h"
#include "gui/theme.h"
#include "gui/timeline_page.h"
#include "storage/db/import_stages.h"
#include "storage/db/job_import.h"
#include "storage/db/stats_at.h"
#include "usecases/simulate.h"

namespace fragscope::gui {

namespace {
constexpr int kMaxRecentFiles = 10;
const QString kRecentKey = QStringLiteral("ui/recent_files");
const QString kGeometryKey = QStringLiteral("ui/geometry");
const QString kStateKey = QStringLiteral("ui/window_state");
const QString kSplitterKey = QStringLiteral("ui/run_splitter");
const QString kDarkKey = QStringLiteral("ui/dark_theme");
// The bundled case study and the variants of its two stories: capacity (fixed length, batch
// 16, and the mitigated run) and fragmentation (variable length, default and expandable).
constexpr const char* kCaseStudyExperiment = "case-study-1.2b-a100-40gb";
constexpr const char* kCaseStudyVariants[] = {"baseline-bs16", "mitigated", "varlen-bs6",
                                              "varlen-bs6-expandable"};
}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      m_browser(new RunsBrowser(this)),
      m_browserDock(new QDockWidget(tr("Runs"), this)),
      m_pages(new QTabWidget(this)),
      m_runSplitter(new QSplitter(Qt::Vertical, this)),
      m_runStack(new QStackedWidget(this)),
      m_welcome(new QWidget(this)),
      m_welcomeText(new QLabel(this)),
      m_timeline(new TimelinePage(this)),
      m_segments(new SegmentMapPage(this)),
      m_summary(new SummaryPage(this)),
      m_compare(new ComparePage(this)),
      m_postMortem(new PostMortemPage(this)),
      m_designer(new DesignerPage(this)),
      m_jobs(new JobPage(this)),
      m_statusLabel(new QLabel(this)),
      m_progress(new QProgressBar(this)),
      m_cancelButton(new QPushButton(tr("Cancel"), this)) {
  setWindowTitle(QStringLiteral("FragScope"));
  setWindowIcon(QIcon(QStringLiteral(":/fragscope/icon.svg")));
  setAcceptDrops(true);
  setObjectName(QStringLiteral("FragScopeMainWindow"));

  m_browserDock->setObjectName(QStringLiteral("RunsDock"));
  m_browserDock->setWidget(m_browser);
  m_browserDock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable |
                             QDockWidget::DockWidgetClosable);
  addDockWidget(Qt::LeftDockWidgetArea, m_browserDock);

  m_runSplitter->addWidget(m_timeline);
  createRunViews();
  m_runSplitter->setStretchFactor(0, 3);
  m_runSplitter->setStretchFactor(1, 2);
  // Until a run is chosen the first tab says how to start instead of showing empty axes.
  m_welcomeText->setObjectName(QStringLiteral("welcomeText"));
  m_welcomeText->setTextFormat(Qt::RichText);
  m_welcomeText->setWordWrap(true);
  m_welcomeText->setAlignment(Qt::AlignCenter);
  auto* welcomeLayout = new QVBoxLayout(m_welcome);
  welcomeLayout->addStretch(1);
  welcomeLayout->addWidget(m_welcomeText);
  auto* welcomeButtons = new QHBoxLayout;
  welcomeButtons->addStretch(1);
  auto* openButton = new QPushButton(tr("Open Snapshot…"), m_welcome);
  openButton->setObjectName(QStringLiteral("welcomeOpen"));
  auto* caseStudyButton = new QPushButton(tr("Open Case Study"), m_welcome);
  caseStudyButton->setObjectName(QStringLiteral("welcomeCaseStudy"));
  auto* designerButton = new QPushButton(tr("Design an Experiment"), m_welcome);
  designerButton->setObjectName(QStringLiteral("welcomeDesigner"));
  for (QPushButton* button : {openButton, caseStudyButton, designerButton})
    welcomeButtons->addWidget(button);
  welcomeButtons->addStretch(1);
  welcomeLayout->addLayout(welcomeButtons);
  welcomeLayout->addStretch(2);
  connect(openButton, &QPushButton::clicked, this, &MainWindow::openSnapshotDialog);
  connect(caseStudyButton, &QPushButton::clicked, this, &MainWindow::openCaseStudy);
  connect(designerButton, &QPushButton::clicked, this, [this] { showPage(Page::designer); });
  m_runStack->addWidget(m_welcome);
  m_runStack->addWidget(m_runSplitter);
  updateWelcome(0);
  m_pages->addTab(m_runStack, tr("Timeline && Segments"));

  // The arrow keys step the cursor anywhere on the run page, not only when the map has focus.
  const std::pair<QKeySequence, std::int64_t> steps[] = {{QKeySequence(Qt::Key_Left), -1},
                                                         {QKeySequence(Qt::Key_Right), 1},
                                                         {QKeySequence(Qt::Key_PageUp), -100},
                                                         {QKeySequence(Qt::Key_PageDown), 100}};
  for (const auto& [keys, delta] : steps) {
    auto* shortcut = new QShortcut(keys, m_runSplitter);
    shortcut->setContext(Qt::WidgetWithChildrenShortcut);
    connect(shortcut, &QShortcut::activated, m_segments,
            [this, delta = delta] { m_segments->stepEvents(delta); });
  }
  for (const auto& [keys, toEnd] :
       {std::pair{QKeySequence(Qt::Key_Home), false}, std::pair{QKeySequence(Qt::Key_End), true}}) {
    auto* shortcut = new QShortcut(keys, m_runSplitter);
    shortcut->setContext(Qt::WidgetWithChildrenShortcut);
    connect(shortcut, &QShortcut::activated, m_segments,
            [this, toEnd = toEnd] { m_segments->jumpToEnd(toEnd); });
  }
  m_pages->addTab(m_activeMemory, tr("Active Memory"));
  m_pages->addTab(m_segmentTimeline, tr("Segments over Time"));
  m_pages->addTab(m_summary, tr("Summary"));
  m_pages->addTab(m_postMortem, tr("Post-mortem"));
  m_pages->addTab(m_compare, tr("Compare"));
  m_pages->addTab(m_designer, tr("Experiment Designer"));
  // The designer's document outlives the session; offscreen (tests, --screenshot, --report) the
  // user's saved experiment is neither read nor overwritten.
  if (QGuiApplication::platformName() != QLatin1String("offscreen"))
    m_designer->rememberDocument(QStringLiteral("designer/document"));
  m_pages->addTab(m_jobs, tr("Jobs"));
  m_pages->setDocumentMode(true);
  setCentralWidget(m_pages);

  m_progress->setRange(0, 1000);
  m_progress->setMaximumWidth(220);
  // The percentage, not only a bar: a large import takes a while and says how far it is.
  m_progress->setTextVisible(true);
  m_progress->setFormat(QStringLiteral("%p%"));
  m_progress->hide();
  m_cancelButton->hide();
  statusBar()->addWidget(m_statusLabel, 1);
  statusBar()->addPermanentWidget(m_progress);
  statusBar()->addPermanentWidget(m_cancelButton);
  connect(m_cancelButton, &QPushButton::clicked, this, &MainWindow::cancelImport);

  connect(m_browser, &RunsBrowser::runActivated, this, &MainWindow::showRun);
  // A rank of a multi-rank job opens like any run: timeline, segment map, post-mortem.
  connect(m_jobs, &JobPage::rankActivated, this, [this](storage::RunId run) {
    m_browser->selectRuns({run});
    showRun(run);
    showPage(Page::run);
  });
  connect(this, &MainWindow::runsChanged, m_jobs, &JobPage::refreshJobs);
  connect(m_jobs, &JobPage::errorOccurred, this,
          [this](const QString& message) { m_statusLabel->setText(message); });
  connect(m_browser, &RunsBrowser::compareRequested, this, &MainWindow::compareRuns);
  connect(m_browser, &RunsBrowser::deleteRequested, this, &MainWindow::deleteRuns);
  connect(m_browser, &RunsBrowser::renameRequested, this, &MainWindow::renameRun);
  connect(m_timeline, &TimelinePage::overviewReady, this, [this](const RunOverview& overview) {
    m_segments->setRun(overview.record.id, overview.record.event_count);
    m_segments->setMemoryLimit(storage::run_memory_limit(overview.record));
    m_summary->setRun(overview.record);
    // Every run gets a post-mortem: a failure's diagnosis, or a finished run's fragmentation.
    m_postMortem->setStartsMidRun(runStartsMidRun(overview.record));
    m_postMortem->setRun(overview.record.id);
  });
  connect(m_postMortem, &PostMortemPage::analysisUnavailable, this, [this] {
    m_statusLabel->setText(tr("No post-mortem for this run: the Post-mortem page says why."));
  });
  // The segment map's OOM banner says what the post-mortem concluded.
  connect(m_postMortem, &PostMortemPage::dataReady, this, [this] {
    std::map<std::uint64_t, std::string> causes;
    if (const auto& data = m_postMortem->data())
      for (const analysis::OomPostMortem& post : data->postMortems)
        causes[post.event_index] = std::string(analysis::to_string(post.cause));
    m_segments->setOomCauses(std::move(causes));
  });
  connect(m_postMortem, &PostMortemPage::workloadChangeRequested, this,
          [this](const QString& document) {
            m_designer->setDocument(nlohmann::json::parse(document.toStdString()));
            showPage(Page::designer);
            m_statusLabel->setText(
                tr("The workload change is in the Experiment Designer: run it "
                   "there to store and compare it."));
          });
  connect(m_postMortem, &PostMortemPage::mitigationStored, this,
          [this](storage::RunId original, storage::RunId created) {
            refreshRuns();
            m_statusLabel->setText(tr("Stored the replay as run %1.").arg(created.value));
            m_browser->selectRuns({original, created});
            compareRuns({original, created});
          });
  connect(m_designer, &DesignerPage::experimentStored, this,
          [this](const std::vector<storage::RunId>& runs) {
            refreshRuns();
            m_statusLabel->setText(
                tr("Stored %n run(s) of the experiment.", nullptr, static_cast<int>(runs.size())));
            if (runs.size() >= 2) {
              m_browser->selectRuns(runs);
              compareRuns(runs);
            } else if (runs.size() == 1) {
              m_browser->selectRuns(runs);
              showPage(Page::run);
            }
          });
  connect(m_designer, &DesignerPage::errorOccurred, this,
          [this](const QString& message) { showError(tr("Experiment"), message); });
  connect(m_postMortem, &PostMortemPage::errorOccurred, this,
          [this](const QString& message) { showError(tr("Post-mortem"), message); });
  connect(m_timeline, &TimelinePage::cursorEventChanged, m_segments, &SegmentMapPage::setEvent);
  connect(m_segments, &SegmentMapPage::eventChanged, m_timeline, &TimelinePage::setCursorEvent);
  connect(m_segments, &SegmentMapPage::snapshotReady, m_summary, &SummaryPage::setState);
  connect(m_timeline, &TimelinePage::errorOccurred, this,
          [this](const QString& message) { m_statusLabel->setText(message); });

  createActions();
  restoreSettings();
}

MainWindow::~MainWindow() = default;

void MainWindow::createActions() {
  auto* openSnapshot =
      new QAction(QIcon::fromTheme(QStringLiteral("document-open")), tr("&Open Snapshot…"), this);
  openSnapshot->setShortcut(QKeySequence::Open);
  openSnapshot->setStatusTip(tr("Import a PyTorch memory snapshot (.pickle, .pickle.gz)"));
  connect(openSnapshot, &QAction::triggered, this, &MainWindow::openSnapshotDialog);
  auto* openDatabaseAction = new QAction(tr("Open &Database…"), this);
  openDatabaseAction->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  connect(openDatabaseAction, &QAction::triggered, this, &MainWindow::openDatabaseDialog);
  auto* openCaseStudyAction = new QAction(tr("Open &Case Study"), this);
  openCaseStudyAction->setObjectName(QStringLiteral("openCaseStudy"));
  openCaseStudyAction->setStatusTip(
      tr("The bundled case study's two stories side by side (runs it when the database lacks "
         "it)"));
  connect(openCaseStudyAction, &QAction::triggered, this, &MainWindow::openCaseStudy);
  auto* newExperiment = new QAction(tr("&New Experiment"), this);
  newExperiment->setObjectName(QStringLiteral("newExperiment"));
  newExperiment->setShortcut(QKeySequence::New);
  newExperiment->setStatusTip(tr("Start the Experiment Designer over from the default experiment"));
  connect(newExperiment, &QAction::triggered, this, [this] {
    m_designer->newDocument();
    showPage(Page::designer);
  });
  auto* reportHtml = new QAction(QIcon::fromTheme(QStringLiteral("document-export")),
                                 tr("Report as &HTML…"), this);
  reportHtml->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  connect(reportHtml, &QAction::triggered, this,
          [this] { exportReportDialog(QStringLiteral("html")); });
  auto* reportPdf = new QAction(tr("Report as &PDF…"), this);
  connect(reportPdf, &QAction::triggered, this,
          [this] { exportReportDialog(QStringLiteral("pdf")); });
  auto* plot = new QAction(tr("Timeline &Plot (PNG, SVG, PDF)…"), this);
  connect(plot, &QAction::triggered, this, &MainWindow::exportPlotDialog);
  auto* csv = new QAction(tr("Timeline &CSV…"), this);
  connect(csv, &QAction::triggered, this, &MainWindow::exportCsvDialog);
  auto* quit = new QAction(QIcon::fromTheme(QStringLiteral("application-exit")), tr("&Quit"), this);
  quit->setShortcut(QKeySequence::Quit);
  connect(quit, &QAction::triggered, this, &QWidget::close);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(newExperiment);
  file->addAction(openSnapshot);
  file->addAction(openDatabaseAction);
  file->addAction(openCaseStudyAction);
  m_recentMenu = file->addMenu(tr("Open &Recent"));
  file->addSeparator();
  QMenu* exportMenu = file->addMenu(tr("&Export"));
  exportMenu->addAction(reportHtml);
  exportMenu->addAction(reportPdf);
  exportMenu->addSeparator();
  exportMenu->addAction(plot);
  exportMenu->addAction(csv);
  file->addSeparator();
  file->addAction(quit);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(m_browserDock->toggleViewAction());
  view->addSeparator();
  const std::pair<QString, Page> pages[] = {
      {tr("&Timeline && Segments"), Page::run},     {tr("&Summary"), Page::summary},
      {tr("&Post-mortem"), Page::postMortem},       {tr("&Compare"), Page::compare},
      {tr("&Experiment Designer"), Page::designer}, {tr("&Jobs"), Page::jobs}};
  int key = Qt::Key_1;
  for (const auto& [name, page] : pages) {
    auto* action = view->addAction(name);
    action->setShortcut(QKeySequence(Qt::CTRL | static_cast<Qt::Key>(key++)));
    connect(action, &QAction::triggered, this, [this, page = page] { showPage(page); });
  }
  view->addSeparator();
  m_darkThemeAction = view->addAction(tr("&Dark Theme"));
  m_darkThemeAction->setCheckable(true);
  connect(m_darkThemeAction, &QAction::toggled, this, [](bool dark) {
    applyTheme(dark);
    QSettings().setValue(kDarkKey, dark);
  });

  QMenu* go = menuBar()->addMenu(tr("&Go"));
  ZoomStack* zoom = m_timeline->zoomStack();
  go->addAction(zoom->backAction());
  go->addAction(zoom->forwardAction());
  go->addAction(zoom->zoomOutAction());
  go->addSeparator();
  auto* nextOom = go->addAction(tr("Next &OOM"));
  nextOom->setShortcut(QKeySequence(Qt::Key_F8));
  connect(nextOom, &QAction::triggered, this, [this] {
    const RunOverview* overview = m_timeline->overview();
    if (!overview)
      return;
    for (std::uint64_t event : overview->oomEvents)
      if (event > m_timeline->cursorEvent()) {
        m_timeline->setCursorEvent(event);
        return;
      }
    if (!overview->oomEvents.empty())
      m_timeline->setCursorEvent(overview->oomEvents.front());
  });
  auto* focusFilter = go->addAction(tr("&Filter Runs"));
  focusFilter->setShortcut(QKeySequence::Find);
  connect(focusFilter, &QAction::triggered, this, [this] {
    m_browserDock->show();
    m_browser->filterEdit()->setFocus();
    m_browser->filterEdit()->selectAll();
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(openCaseStudyAction);
  help->addAction(tr("&About FragScope"), this, [this] {
    QMessageBox::about(
        this, tr("About FragScope"),
        tr("<h3>FragScope %1</h3><p>A workbench for CUDA memory fragmentation: PyTorch memory "
           "snapshots, the caching allocator model, timelines, segment maps and reports.</p>"
           "<p>Revision %2</p>")
            .arg(QString::fromLatin1(kVersion), QString::fromLatin1(kGitRevision)));
  });

  QToolBar* toolbar = addToolBar(tr("Main"));
  toolbar->setObjectName(QStringLiteral("MainToolbar"));
  toolbar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  toolbar->addAction(openSnapshot);
  toolbar->addAction(reportHtml);
  toolbar->addSeparator();
  toolbar->addAction(zoom->backAction());
  toolbar->addAction(zoom->forwardAction());
  toolbar->addAction(zoom->zoomOutAction());
  toolbar->addAction(nextOom);
}

void MainWindow::restoreSettings() {
  QSettings settings;
  restoreGeometry(settings.value(kGeometryKey).toByteArray());
  // First launch: a runs dock wide enough for name, outcome and both peaks.
  if (!restoreState(settings.value(kStateKey).toByteArray()))
    resizeDocks({m_browserDock}, {430}, Qt::Horizontal);
  m_runSplitter->restoreState(settings.value(kSplitterKey).toByteArray());
  m_darkThemeAction->setChecked(settings.value(kDarkKey, false).toBool());
  updateRecentMenu();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue(kGeometryKey, saveGeometry());
  settings.setValue(kStateKey, saveState());
  settings.setValue(kSplitterKey, m_runSplitter->saveState());
  m_importQueue.clear();
  m_importJob.cancel();
  m_caseStudyJob.cancel();
  QMainWindow::closeEvent(event);
}

bool MainWindow::openDatabase(const QString& path) {
  try {
    QDir().mkpath(QFileInfo(path).absolutePath());
    auto store = std::make_unique<storage::RunStore>(path.toStdString());
    m_store = std::move(store);
  } catch (const std::exception& error) {
    showError(tr("Cannot open database"), QString::fromUtf8(error.what()));
    return false;
  }
  m_databasePath = path;
  m_currentRun.reset();
  m_runStack->setCurrentWidget(m_welcome);
  m_timeline->setDatabase(path);
  m_segments->setDatabase(path);
  m_summary->setDatabase(path);
  m_compare->setDatabase(path);
  m_postMortem->setDatabase(path);
  m_designer->setDatabase(path);
  m_jobs->setDatabase(path);
  m_activeMemory->setDatabase(path);
  m_segmentTimeline->setDatabase(path);
  m_history->setDatabase(path);
  m_summary->clear();
  setWindowTitle(QStringLiteral("%1 — FragScope").arg(QFileInfo(path).fileName()));
  refreshRuns();
  m_statusLabel->setText(tr("Database %1").arg(path));
  return true;
}

void MainWindow::refreshRuns() {
  if (!m_store)
    return;
  try {
    auto runs = m_store->list_runs();
    updateWelcome(runs.size());
    m_browser->setRuns(std::move(runs), storage::experiment_progress(*m_store));
  } catch (const std::exception& error) {
    showError(tr("Cannot list runs"), QString::fromUtf8(error.what()));
  }
  emit runsChanged();
}

void MainWindow::showRun(storage::RunId run) {
  if (m_currentRun == run)
    return;
  m_currentRun = run;
  m_runStack->setCurrentWidget(m_runSplitter);
  m_segments->clear();
  m_timeline->setRun(run);
  if (m_pages->currentWidget() == m_compare)
    showPage(Page::run);
}

std::vector<storage::RunId> MainWindow::caseStudyRuns() const {
  if (!m_store)
    return {};
  // The newest copy: running the case study again stores a fresh experiment of the same name.
  std::optional<storage::ExperimentRecord> experiment;
  for (storage::ExperimentRecord& record : m_store->list_experiments())
    if (record.name == kCaseStudyExperiment && (!experiment || record.id > experiment->id))
      experiment = std::move(record);
  if (!experiment)
    return {};
  std::map<std::string, storage::RunId> byName;
  for (const storage::RunRecord& record : m_store->runs_of(experiment->id))
    byName[record.name] = record.id;
  std::vector<storage::RunId> runs;
  for (const char* variant : kCaseStudyVariants) {
    const auto found = byName.find(variant);
    if (found == byName.end())
      return {};
    runs.push_back(found->second);
  }
  return runs;
}

QString MainWindow::caseStudyStory() {
  return tr("<b>Case study: a 1.2B GPT on a 40 GB A100, two stories.</b> "
            "<b>1 · Capacity:</b> with sequences of 1024 tokens, <i>%1</i> runs out of memory "
            "because its live tensors do not fit; <i>%2</i> (micro-batch 4 × accumulation 4, "
            "FFN checkpointing, compiled MLP and LayerNorm) fits. "
            "<b>2 · Fragmentation:</b> with variable-length batches, <i>%3</i> runs out of memory "
            "with gigabytes reserved but unallocated in split segments; <i>%4</i> "
            "(expandable_segments:True) fits with the same batches. Every outcome is the "
            "allocator model's.")
      .arg(QLatin1String(kCaseStudyVariants[0]), QLatin1String(kCaseStudyVariants[1]),
           QLatin1String(kCaseStudyVariants[2]), QLatin1String(kCaseStudyVariants[3]));
}

bool MainWindow::openCaseStudy() {
  if (!m_store) {
    showError(tr("Case study"), tr("No database is open."));
    return false;
  }
  if (const auto runs = caseStudyRuns(); !runs.empty()) {
    m_statusLabel->setText(tr("Case study: the capacity story and the fragmentation story"));
    m_browser->selectRuns(runs);
    m_compare->setRuns(runs, caseStudyStory());
    showPage(Page::compare);
    return true;
  }
  if (m_caseStudyJob.busy())
    return true;
  // The database lacks it: run the bundled experiment's four variants of the two stories.
  QFile file(QStringLiteral(":/fragscope/case-study.json"));
  if (!file.open(QIODevice::ReadOnly)) {
    showError(tr("Case study"), tr("The bundled case study is missing from this build."));
    return false;
  }
  nlohmann::json document = nlohmann::json::parse(file.readAll().toStdString());
  nlohmann::json variants = nlohmann::json::array();
  for (const nlohmann::json& variant : document["variants"])
    for (const char* wanted : kCaseStudyVariants)
      if (variant.value("name", std::string()) == wanted)
        variants.push_back(variant);
  document["variants"] = variants;
  const QString database = m_databasePath;
  setProgress(tr("Running the case study (%n simulated run(s))…", nullptr,
                 static_cast<int>(variants.size())),
              0);
  m_caseStudyJob.start(
      [document, database](const JobContext& job) {
        const workload::Experiment experiment =
            workload::parse_experiment(document, "case-study-1.2b-a100-40gb.json");
        storage::RunStore store(database.toStdString());
        return usecases::simulate_and_store(store, experiment, document, job.workControl())
            .runs.size();
      },
      [this](std::size_t) {
        hideProgress();
        refreshRuns();
        if (caseStudyRuns().empty()) {
          showError(
              tr("Case study"),
              tr("The bundled experiment has no variants %1, %2, %3 and %4.")
                  .arg(QLatin1String(kCaseStudyVariants[0]), QLatin1String(kCaseStudyVariants[1]),
                       QLatin1String(kCaseStudyVariants[2]), QLatin1String(kCaseStudyVariants[3])));
          return;
        }
        openCaseStudy();
      },
      [this](const QString& message) {
        hideProgress();
        showError(tr("Case study"), message);
      },
      [this](double fraction) { setProgress(tr("Running the case study…"), fraction); });
  return true;
}

void MainWindow::compareRuns(const std::vector<storage::RunId>& runs) {
  if (runs.size() < 2) {
    m_statusLabel->setText(tr("Select two or more runs to compare."));
    return;
  }
  m_compare->setRuns(runs);
  showPage(Page::compare);
}

void MainWindow::showPage(Page page) {
  switch (page) {
    case Page::run:
      m_pages->setCurrentWidget(m_runStack);
      break;
    case Page::activeMemory:
      m_pages->setCurrentWidget(m_activeMemory);
      break;
    case Page::segmentTimeline:
      m_pages->setCurrentWidget(m_segmentTimeline);
      break;
    case Page::summary:
      m_pages->setCurrentWidget(m_summary);
      break;
    case Page::postMortem:
      m_pages->setCurrentWidget(m_postMortem);
      break;
    case Page::compare:
      m_pages->setCurrentWidget(m_compare);
      break;
    case Page::designer:
      m_pages->setCurrentWidget(m_designer);
      break;
    case Page::jobs:
      m_pages->setCurrentWidget(m_jobs);
      break;
  }
}

bool MainWindow::showPage(const QString& name) {
  const QString page = name.toLower();
  if (page == QLatin1String("timeline") || page == QLatin1String("run")) {
    showPage(Page::run);
  } else if (page == QLatin1String("segments") || page == QLatin1String("segment-map")) {
    showPage(Page::run);
    m_segments->mapWidget()->setFocus();
  } else if (showRunView(page)) {
  } else if (page == QLatin1String("summary")) {
    showPage(Page::summary);
  } else if (page == QLatin1String("postmortem") || page == QLatin1String("post-mortem") ||
             page == QLatin1String("oom")) {
    showPage(Page::postMortem);
  } else if (page == QLatin1String("designer")) {
    showPage(Page::designer);
  } else if (page == QLatin1String("compare")) {
    showPage(Page::compare);
  } else if (page == QLatin1String("jobs") || page == QLatin1String("job")) {
    showPage(Page::jobs);
  } else {
    return false;
  }
  return true;
}

bool MainWindow::busy() const {
  return m_timeline->busy() || m_segments->busy() || m_summary->busy() || m_compare->busy() ||
         m_postMortem->busy() || m_designer->busy() || m_jobs->busy() || importing() ||
         m_exportJob.busy() || m_deleteJob.busy() || m_caseStudyJob.busy() || runViewsBusy();
}

void MainWindow::importFiles(const QStringList& paths) {
  for (const QString& path : paths) {
    if (!isSnapshotFile(path)) {
      showError(tr("Not a snapshot"),
                tr("%1 is not a PyTorch memory snapshot (.pickle or .pickle.gz).").arg(path));
      continue;
    }
    m_importQueue << path;
  }
  if (!m_importJob.busy())
    startNextImport();
}

void MainWindow::startNextImport() {
  if (m_importQueue.isEmpty() || m_databasePath.isEmpty()) {
    hideProgress();
    return;
  }
  const QString path = m_importQueue.takeFirst();
  const QString database = m_databasePath;
  addRecentFile(path);
  setProgress(tr("Importing %1…").arg(QFileInfo(path).fileName()), 0);
  m_importJob.start(
      [database, path, picker = dialogDevicePicker(this)](const JobContext& job) {
        return importSnapshotFile(database, path, &job, picker);
      },
      [this](ImportResult result) {
        refreshRuns();
        m_statusLabel->setText(tr("Imported %1: %2 events%3")
                                   .arg(result.name, QString::number(result.events),
                                        result.warnings.isEmpty()
                                            ? QString()
                                            : QStringLiteral(" (") +
                                                  result.warnings.join(QStringLiteral("; ")) +
                                                  QLatin1Char(')')));
        m_browser->selectRuns({result.run});
        emit importFinished(result.run);
        startNextImport();
      },
      [this, path](const QString& message) {
        hideProgress();
        showError(tr("Import failed"), message);
        emit importFailed(message);
        startNextImport();
      },
      [this, path](double fraction) {
        setProgress(tr("Importing %1…").arg(QFileInfo(path).fileName()), fraction);
      });
}

void MainWindow::cancelImport() {
  m_caseStudyJob.cancel();
  m_importQueue.clear();
  if (m_importJob.busy()) {
    m_importJob.cancel();
    m_statusLabel->setText(tr("Import cancelled."));
  }
  hideProgress();
}

bool MainWindow::welcomeShown() const {
  return m_runStack->currentWidget() == m_welcome;
}

void MainWindow::updateWelcome(std::size_t runCount) {
  if (runCount == 0) {
    m_welcomeText->setText(
        tr("<h2>No runs yet</h2>"
           "<p>FragScope shows where CUDA memory went and why a run ran out of it. To start:</p>"
           "<p><b>Open a PyTorch memory snapshot</b> (File ▸ Open Snapshot, Ctrl+O) or drag a "
           "<tt>.pickle</tt> onto this window: one you saved with "
           "<tt>torch.cuda.memory._dump_snapshot()</tt>.</p>"
           "<p><b>Open the case study</b> (File ▸ Open Case Study): a 1.2B model on a 40 GB A100, "
           "a capacity OOM and a fragmentation OOM side by side.</p>"
           "<p><b>Design an experiment</b>: simulate a training workload on the allocator "
           "model.</p>"));
  } else {
    m_welcomeText->setText(
        tr("<h2>Select a run</h2><p>Pick one of the %n run(s) in the Runs browser on the left to "
           "see its memory timeline and segment map; select two or more and press Compare.</p>"
           "<p>Or open another snapshot (Ctrl+O, or drag it here), the case study, or design an "
           "experiment.</p>",
           nullptr, static_cast<int>(runCount)));
  }
}

void MainWindow::setProgress(const QString& message, double fraction) {
  const int percent = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100);
  m_statusLabel->setText(QStringLiteral("%1 %2%").arg(message).arg(percent));
  m_progress->setValue(static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 1000));
  m_progress->show();
  m_cancelButton->show();
}

void MainWindow::hideProgress() {
  m_progress->hide();
  m_cancelButton->hide();
}

void MainWindow::showError(const QString& title, const QString& message) {
  m_statusLabel->setText(title + QStringLiteral(": ") + message);
  // Offscreen (tests, --screenshot, --report) nobody can close a dialog.
  if (QGuiApplication::platformName() != QLatin1String("offscreen"))
    QMessageBox::warning(this, title, message);
}

void MainWindow::deleteRuns(const std::vector<storage::RunId>& runs) {
  if (runs.empty())
    return;
  const auto deleted = [&](storage::RunId run) {
    return std::find(runs.begin(), runs.end(), run) != runs.end();
  };
  // Every page that shows a deleted run forgets it: none may keep drawing (or reading) it.
  if (m_currentRun && deleted(*m_currentRun)) {
    m_currentRun.reset();
    m_runStack->setCurrentWidget(m_welcome);
    m_timeline->clear();
    m_segments->clear();
    m_summary->clear();
    m_postMortem->clear();
    m_activeMemory->clear();
    m_segmentTimeline->clear();
    m_history->clear();
  }
  if (std::any_of(runs.begin(), runs.end(),
                  [&](storage::RunId run) { return m_compare->containsRun(run); }))
    m_compare->clear();
  const auto& ranks = m_jobs->data().ranks;
  if (std::any_of(ranks.begin(), ranks.end(),
                  [&](const JobRankView& rank) { return deleted(rank.record.id); }))
    m_jobs->clear();
  const QString database = m_databasePath;
  m_statusLabel->setText(tr("Deleting %n run(s)…", nullptr, static_cast<int>(runs.size())));
  m_deleteJob.start(
      [database, runs](const JobContext&) {
        storage::RunStore store(database.toStdString());
        for (storage::RunId run : runs)
          store.delete_run(run);
        return runs.size();
      },
      [this](std::size_t count) {
        m_statusLabel->setText(tr("Deleted %n run(s).", nullptr, static_cast<int>(count)));
        refreshRuns();
        m_jobs->refreshJobs();
      },
      [this](const QString& message) { showError(tr("Delete failed"), message); });
}

void MainWindow::renameRun(storage::RunId run, const QString& name) {
  try {
    m_store->rename_run(run, name.toStdString());
    m_browser->model()->updateName(run, name);
  } catch (const std::exception& error) {
    showError(tr("Rename failed"), QString::fromUtf8(error.what()));
  }
}

ReportScope MainWindow::reportScope() const {
  ReportScope scope;
  if (m_pages->currentWidget() == m_compare && !m_compare->data().runs.empty()) {
    for (const ComparedRun& run : m_compare->data().runs)
      scope.runs.push_back(run.record.id);
    scope.axis = static_cast<CompareAxis>(m_compare->overlayAxis());
    if (m_compare->storyLabel()->isVisibleTo(m_compare))
      scope.story = m_compare->storyLabel()->text();
    return scope;
  }
  if (m_pages->currentWidget() == m_jobs && !m_jobs->data().ranks.empty()) {
    for (const JobRankView& rank : m_jobs->data().ranks)
      scope.runs.push_back(rank.record.id);
    return scope;
  }
  scope.runs = m_browser->selectedRuns();
  if (scope.runs.empty() && m_currentRun)
    scope.runs.push_back(*m_currentRun);
  return scope;
}

void MainWindow::exportReportDialog(const QString& suffix) {
  const ReportScope scope = reportScope();
  if (scope.runs.empty()) {
    m_statusLabel->setText(tr("Select the runs to report on first."));
    return;
  }
  const QString filter = suffix == QLatin1String("pdf") ? tr("PDF (*.pdf)") : tr("HTML (*.html)");
  QString path =
      saveFileName(this, tr("Export Report"), QStringLiteral("fragscope-report.") + suffix, filter);
  if (path.isEmpty())
    return;
  if (!path.endsWith(QLatin1Char('.') + suffix, Qt::CaseInsensitive))
    path += QLatin1Char('.') + suffix;
  const QString database = m_databasePath;
  setProgress(tr("Building report…"), 0.1);
  m_exportJob.start(
      [database, scope](const JobContext& job) {
        ReportData data = loadReportData(database, scope.runs, &job);
        data.axis = scope.axis.value_or(data.axis);
        data.story = scope.story;
        return data;
      },
      [this, path](ReportData data) {
        QString error;
        const auto format = reportFormatFor(path);
        const bool ok = format && writeReport(path, *format, data, renderReportPlots(data), &error);
        hideProgress();
        if (ok)
          m_statusLabel->setText(tr("Report written to %1").arg(path));
        else
          showError(tr("Export failed"), error);
      },
      [this](const QString& message) {
        hideProgress();
        showError(tr("Export failed"), message);
      });
}

void MainWindow::exportPlotDialog() {
  const QString path =
      saveFileName(this, tr("Export Plot"), QStringLiteral("timeline.png"),
                   tr("PNG image (*.png);;SVG image (*.svg);;PDF document (*.pdf)"));
  if (path.isEmpty())
    return;
  QString error;
  if (m_timeline->savePlot(path, &error))
    m_statusLabel->setText(tr("Plot written to %1").arg(path));
  else
    showError(tr("Export failed"), error);
}

void MainWindow::exportCsvDialog() {
  const QString path = saveFileName(this, tr("Export Timeline CSV"), QStringLiteral("timeline.csv"),
                                    tr("CSV (*.csv)"));
  if (path.isEmpty())
    return;
  QSaveFile file(path);
  const QByteArray csv = m_timeline->timelineCsv().toUtf8();
  if (!file.open(QIODevice::WriteOnly) || file.write(csv) != csv.size() || !file.commit())
    showError(tr("Export failed"), tr("Cannot write %1: %2").arg(path, file.errorString()));
  else
    m_statusLabel->setText(tr("Timeline written to %1").arg(path));
}

void MainWindow::openSnapshotDialog() {
  const QStringList paths = openFileNames(
      this, tr("Open PyTorch Memory Snapshot"), QString(),
      tr("PyTorch memory snapshots and multi-rank jobs (*.pickle *.pickle.gz *.pkl *.pkl.gz "
         "fragscope-job.json);;All files (*)"));
  std::vector<std::string> files;
  for (const QString& path : paths)
    files.push_back(path.toStdString());
  // Several rank snapshots (rank<N> in every name) or a job manifest: one job, one run per rank.
  if (storage::looks_like_job(files))
    importJob(paths);
  else
    importFiles(paths);
}

void MainWindow::importJob(const QStringList& paths) {
  if (m_databasePath.isEmpty() || paths.isEmpty())
    return;
  std::vector<std::string> files;
  for (const QString& path : paths)
    files.push_back(path.toStdString());
  const QString database = m_databasePath;
  setProgress(tr("Importing a job of %n file(s)…", nullptr, static_cast<int>(paths.size())), 0);
  m_importJob.start(
      [database, files](const JobContext& job) {
        storage::RunStore store(database.toStdString());
        const storage::JobSource source = storage::job_source_of(files);
        storage::JobImportOptions options;
        options.job_name = storage::unused_job_name(store, source);
        // Reading and storing the ranks, each half of the bar (it went back to 0 at "storing").
        options.control.progress = fraction_progress(
            storage::kJobImportStages, [&job](double fraction) { job.progress(fraction); });
        const storage::JobImportResult result = storage::import_job(store, source, options);
        return result.job;
      },
      [this](storage::JobId job) {
        hideProgress();
        refreshRuns();
        m_jobs->showJob(job);
        showPage(Page::jobs);
        m_statusLabel->setText(tr("Imported the job."));
      },
      [this](const QString& message) {
        hideProgress();
        showError(tr("Job import failed"), message);
        emit importFailed(message);
      },
      [this](double fraction) { setProgress(tr("Importing the job…"), fraction); });
}

void MainWindow::openDatabaseDialog() {
  const QString path =
      openFileName(this, tr("Open FragScope Database"), QFileInfo(m_databasePath).absolutePath(),
                   tr("FragScope databases (*.db *.sqlite);;All files (*)"));
  if (!path.isEmpty() && openDatabase(path))
    addRecentFile(path);
}

void MainWindow::addRecentFile(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value(kRecentKey).toStringList();
  const QString absolute = QFileInfo(path).absoluteFilePath();
  recent.removeAll(absolute);
  recent.prepend(absolute);
  while (recent.size() > kMaxRecentFiles)
    recent.removeLast();
  settings.setValue(kRecentKey, recent);
  updateRecentMenu();
}

void MainWindow::updateRecentMenu() {
  m_recentMenu->clear();
  const QStringList recent = QSettings().value(kRecentKey).toStringList();
  for (const QString& path : recent) {
    m_recentMenu
        ->addAction(QFileInfo(path).fileName(), this,
                    [this, path] {
                      if (isSnapshotFile(path))
                        importFiles({path});
                      else
                        openDatabase(path);
                    })
        ->setToolTip(path);
  }
  m_recentMenu->setEnabled(!recent.isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!event->mimeData()->hasUrls())
    return;
  for (const QUrl& url : event->mimeData()->urls())
    if (url.isLocalFile() && isSnapshotFile(url.toLocalFile())) {
      event->acceptProposedAction();
      return;
    }
}

void MainWindow::dropEvent(QDropEvent* event) {
  QStringList paths;
  for (const QUrl& url : event->mimeData()->urls())
    if (url.isLocalFile())
      paths << url.toLocalFile();
  importFiles(paths);
  event->acceptProposedAction();
}

}  // namespace fragscope::gui
