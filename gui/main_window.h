#pragma once
// The FragScope workbench: a runs browser dock beside the pages for the selected run(s) — Run
// (timeline over the segment map, linked by the cursor), Summary and Compare. The window owns
// the database connection used on the GUI thread (listing, renaming); everything that reads
// events or writes runs happens in jobs with their own connection.
#include <QLabel>
#include <QMainWindow>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QStringList>
#include <QTabWidget>
#include <memory>
#include <optional>
#include <vector>

#include "gui/job_tracker.h"
#include "gui/metatypes.h"
#include "gui/report.h"
#include "storage/db/run_store.h"

class QDockWidget;
class QMenu;
class QStackedWidget;

namespace fragscope::gui {

class RunsBrowser;
class TimelinePage;
class SegmentMapPage;
class SummaryPage;
class ComparePage;
class PostMortemPage;
class DesignerPage;
class JobPage;
class BandTimelinePage;
class EventHistoryPage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum class Page {
    run,
    activeMemory,
    segmentTimeline,
    summary,
    postMortem,
    compare,
    designer,
    jobs
  };

  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Opens (creating if needed) the database; false with a message box / status when it fails.
  bool openDatabase(const QString& path);
  QString databasePath() const { return m_databasePath; }

  // Imports snapshot files one after another in the background (File ▸ Open, drag and drop).
  void importFiles(const QStringList& paths);
  // Imports several rank snapshots or a fragscope-job.json as one multi-rank job in the
  // background, then shows it on the Jobs page.
  void importJob(const QStringList& paths);
  void cancelImport();
  bool importing() const { return m_importJob.busy() || !m_importQueue.isEmpty(); }

  void showRun(storage::RunId run);
  // Shows `run` as `fragscope --run` does: once its overview is in (which opens the cursor at
  // the OOM or the peak), the cursor after `event` events when given, and the live block at
  // `block` selected in the segment map and on the Active Memory page, its stack in their
  // frames panels (0 = the largest live block with a recorded stack, else the largest).
  void showRunAt(storage::RunId run, std::optional<std::uint64_t> event,
                 std::optional<std::uint64_t> block);
  // The bundled case study (experiments/case-study-1.2b-a100-40gb.json): its two stories side
  // by side on the Compare page — capacity (baseline-bs16 vs mitigated) and fragmentation
  // (varlen-bs6 vs varlen-bs6-expandable), found by variant name in the newest stored copy of
  // the experiment. When the database lacks them, runs those variants in the background first
  // (progress and Cancel on the status bar). False only when no database is open.
  bool openCaseStudy();
  // The four runs of the two stories in the newest stored copy; empty when any is missing.
  std::vector<storage::RunId> caseStudyRuns() const;
  static QString caseStudyStory();
  // What Export ▸ Report writes: what is on screen. The Compare page's runs with its axis and
  // story, the Jobs page's ranks, else the runs selected in the browser or the run shown.
  ReportScope reportScope() const;
  void compareRuns(const std::vector<storage::RunId>& runs);
  void showPage(Page page);
  // "timeline", "segments", "summary", "compare"; false for an unknown name.
  bool showPage(const QString& name);
  void refreshRuns();

  // Nothing is loading: every page has the data for what it shows.
  bool busy() const;

  RunsBrowser* runsBrowser() const { return m_browser; }
  TimelinePage* timelinePage() const { return m_timeline; }
  SegmentMapPage* segmentMapPage() const { return m_segments; }
  SummaryPage* summaryPage() const { return m_summary; }
  ComparePage* comparePage() const { return m_compare; }
  PostMortemPage* postMortemPage() const { return m_postMortem; }
  DesignerPage* designerPage() const { return m_designer; }
  JobPage* jobPage() const { return m_jobs; }
  BandTimelinePage* activeMemoryPage() const { return m_activeMemory; }
  BandTimelinePage* segmentTimelinePage() const { return m_segmentTimeline; }
  EventHistoryPage* historyPage() const { return m_history; }
  QTabWidget* pages() const { return m_pages; }
  // The first tab shows this until a run is selected: how to start (open, drag, case study).
  QWidget* welcome() const { return m_welcome; }
  QLabel* welcomeText() const { return m_welcomeText; }
  bool welcomeShown() const;
  // The status bar's progress: "Importing x… 42%" and a bar that shows the percentage.
  void setProgress(const QString& message, double fraction);
  QProgressBar* progressBar() const { return m_progress; }
  QLabel* statusLabel() const { return m_statusLabel; }
  std::optional<storage::RunId> currentRun() const { return m_currentRun; }

 signals:
  void importFinished(fragscope::storage::RunId run);
  void importFailed(const QString& message);
  void runsChanged();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void createActions();
  // The Active Memory Timeline and Segment timeline tabs and the State History beside the map,
  // linked to the run's cursor (main_window_views.cpp).
  void createRunViews();
  bool runViewsBusy() const;
  bool showRunView(const QString& name);
  void createMenus();
  void restoreSettings();
  void addRecentFile(const QString& path);
  void updateRecentMenu();
  void startNextImport();
  void hideProgress();
  void showError(const QString& title, const QString& message);
  void updateWelcome(std::size_t runCount);
  void deleteRuns(const std::vector<storage::RunId>& runs);
  void renameRun(storage::RunId run, const QString& name);
  void exportReportDialog(const QString& suffix);
  void exportPlotDialog();
  void exportCsvDialog();
  void openSnapshotDialog();
  void openDatabaseDialog();

  QString m_databasePath;
  std::unique_ptr<storage::RunStore> m_store;
  std::optional<storage::RunId> m_currentRun;

  RunsBrowser* m_browser;
  QDockWidget* m_browserDock;
  QTabWidget* m_pages;
  QSplitter* m_runSplitter;
  QStackedWidget* m_runStack;
  QWidget* m_welcome;
  QLabel* m_welcomeText;
  TimelinePage* m_timeline;
  SegmentMapPage* m_segments;
  SummaryPage* m_summary;
  ComparePage* m_compare;
  PostMortemPage* m_postMortem;
  DesignerPage* m_designer;
  JobPage* m_jobs;
  BandTimelinePage* m_activeMemory = nullptr;
  BandTimelinePage* m_segmentTimeline = nullptr;
  EventHistoryPage* m_history = nullptr;

  QLabel* m_statusLabel;
  QProgressBar* m_progress;
  QPushButton* m_cancelButton;
  QMenu* m_recentMenu = nullptr;
  QAction* m_darkThemeAction = nullptr;

  QStringList m_importQueue;
  JobTracker m_importJob{this};
  JobTracker m_deleteJob{this};
  JobTracker m_exportJob{this};
  JobTracker m_caseStudyJob{this};
};

}  // namespace fragscope::gui
