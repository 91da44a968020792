#pragma once
// Reports of what the Compare page shows: one self-contained HTML file (plots embedded as PNG
// data URIs, the case study's story, metrics, what differs, environment tables, each run's plot
// with its OOMs and memory limit, its segment map at the reserved peak and its OOM post-mortem)
// or the same content as a paginated PDF (QTextDocument printed to QPdfWriter). Loading runs off
// the GUI thread, plots are drawn on it (QCustomPlot is a widget), writing can happen anywhere.
#include <QFont>
#include <QImage>
#include <QSizeF>
#include <QString>
#include <memory>
#include <vector>

#include "engine/analysis/job_balance.h"
#include "gui/compare_page.h"
#include "gui/compare_views.h"
#include "gui/job_page.h"
#include "gui/post_mortem_page.h"
#include "storage/db/run_store.h"

class QTextDocument;

namespace fragscope::gui {

class JobContext;

// What the allocator looked like right before one OOM.
struct OomFinding {
  std::uint64_t eventIndex = 0;
  Bytes request = 0;     // the rounded request that failed
  Bytes deviceFree = 0;  // cudaMemGetInfo's free bytes at the time
  Bytes reserved = 0;
  Bytes live = 0;
  Bytes freeCached = 0;  // free bytes inside reserved segments
  Bytes largestFree = 0;
};

struct ReportRun {
  ComparedRun run;
  std::vector<OomFinding> ooms;  // at most the first few
  // The engine's analysis of the run's OOMs (classification, evidence, PyTorch's figures) and
  // its what-if table, as the post-mortem page shows them; unset for runs without an OOM.
  std::optional<PostMortemData> postMortem;
  QString postMortemError;  // why the engine could not analyse the run (the report still goes on)
};

struct ReportData {
  QString databasePath;
  std::vector<ReportRun> runs;
  ComparisonData comparison;  // the same runs, for the aligned table and warnings
  // The plots' x axis: the Compare page's choice when the report is of what it shows, else the
  // axis the page would open on (preferredAxis).
  CompareAxis axis = CompareAxis::events;
  // HTML shown above the comparison (the case study's two stories); may be empty.
  QString story;
  // The multi-rank jobs the runs belong to: their imbalance tables (the Jobs page's) and, in
  // jobViews (same order), every rank's timeline for the job's small multiples.
  std::vector<analysis::JobBalance> jobs;
  std::vector<JobViewData> jobViews;
};

// What the report draws, each in the run's Compare colour on one light palette and font.
struct ReportPlots {
  std::vector<QImage> runs;      // per run: its curves, OOM crosses and memory-limit line
  QImage overlay;                // every run on one plot; null for a single run
  std::vector<QImage> peakMaps;  // per run: the segment map at its reserved peak, null if unknown
  std::vector<QImage> jobs;      // per job (data.jobViews): its ranks' small multiples
};

enum class ReportFormat { html, pdf };

// What Export ▸ Report covers: what is on screen (MainWindow::reportScope). The axis and story
// override loadReportData's when set.
struct ReportScope {
  std::vector<storage::RunId> runs;
  std::optional<CompareAxis> axis;
  QString story;
};

ReportData loadReportData(const QString& databasePath, const std::vector<storage::RunId>& runs,
                          const JobContext* job = nullptr);
// GUI thread only (QCustomPlot and the segment map are widgets).
ReportPlots renderReportPlots(const ReportData& data);
// The report's one font family (the application's) at a size; the HTML names the same family.
QFont reportFont(int pointSize, bool bold = false);
// `embedImages`: plots as PNG data URIs (one self-contained file), else <img src="NAME.png">
// resources the PDF path adds to its document.
QString reportHtml(const ReportData& data, const ReportPlots& plots, bool embedImages);
// The PDF's paginated document: every run's section starts a page, so no heading is left at the
// foot of a page without its plot.
std::unique_ptr<QTextDocument> reportDocument(const ReportData& data, const ReportPlots& plots,
                                              const QSizeF& pageSize);
// Writes the report; false with `error` set when the file cannot be written.
bool writeReport(const QString& path, ReportFormat format, const ReportData& data,
                 const ReportPlots& plots, QString* error);
// HTML or PDF by suffix; loads, renders and writes in one call (the CLI's --report). GUI thread.
bool exportReport(const QString& databasePath, const std::vector<storage::RunId>& runs,
                  const QString& path, QString* error);
std::optional<ReportFormat> reportFormatFor(const QString& path);

}  // namespace fragscope::gui
