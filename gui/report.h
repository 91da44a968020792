#pragma once
// Reports: one self-contained HTML file (plots embedded as PNG data URIs, metrics and
// environment tables, an OOM post-mortem per run) or the same content as a paginated PDF
// (QTextDocument printed to QPdfWriter). Loading runs off the GUI thread, plots are drawn on
// it (QCustomPlot is a widget), writing can happen anywhere.
#include <QImage>
#include <QString>
#include <vector>

#include "engine/analysis/job_balance.h"
#include "gui/compare_page.h"
#include "gui/job_page.h"
#include "gui/post_mortem_page.h"
#include "storage/db/run_store.h"

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
  // The multi-rank jobs the runs belong to: their imbalance tables (the Jobs page's) and, in
  // jobViews (same order), every rank's timeline for the job's small multiples.
  std::vector<analysis::JobBalance> jobs;
  std::vector<JobViewData> jobViews;
};

enum class ReportFormat { html, pdf };

ReportData loadReportData(const QString& databasePath, const std::vector<storage::RunId>& runs,
                          const JobContext* job = nullptr);
// One plot per run, for two or more runs an overlay, then one image of small multiples per job
// (its ranks on one scale, by time since each rank's first event). GUI thread only.
std::vector<QImage> renderReportPlots(const ReportData& data);
// `embedImages`: plots as PNG data URIs (one self-contained file), else <img src="plotN.png">
// for a caller that writes the images beside the HTML (the PDF path renders them itself).
QString reportHtml(const ReportData& data, const std::vector<QImage>& plots, bool embedImages);
// Writes the report; false with `error` set when the file cannot be written.
bool writeReport(const QString& path, ReportFormat format, const ReportData& data,
                 const std::vector<QImage>& plots, QString* error);
// HTML or PDF by suffix; loads, renders and writes in one call (the CLI's --report). GUI thread.
bool exportReport(const QString& databasePath, const std::vector<storage::RunId>& runs,
                  const QString& path, QString* error);
std::optional<ReportFormat> reportFormatFor(const QString& path);

}  // namespace fragscope::gui
