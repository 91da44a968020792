#include "gui/report.h"

#include <QBuffer>
#include <QDateTime>
#include <QFile>
#include <QFileInfo>
#include <QPageSize>
#include <QPdfWriter>
#include <QTextDocument>
#include <QUrl>
#include <algorithm>

#include "fragscope/version.h"
#include "gui/format.h"
#include "gui/job_page.h"
#include "gui/job_tracker.h"
#include "gui/plot_style.h"
#include "gui/run_data.h"
#include "gui/runs_model.h"
#include "gui/segment_layout.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

namespace {
constexpr std::size_t kMaxOomsPerRun = 5;
constexpr int kPlotWidth = 1200;
constexpr int kPlotHeight = 420;

QString esc(const std::string& text) {
  return QString::fromStdString(text).toHtmlEscaped();
}
QString bytes(double value) {
  return formatBytes(value);
}

QImage renderPlot(const std::vector<const ComparedRun*>& runs, const QString& title) {
  QCustomPlot plot;
  plot.resize(kPlotWidth, kPlotHeight);
  QPalette light;
  light.setColor(QPalette::Base, Qt::white);
  light.setColor(QPalette::Text, QColor(0x20, 0x20, 0x20));
  setUpMemoryPlot(&plot);
  applyPlotPalette(&plot, light);
  plot.plotLayout()->insertRow(0);
  plot.plotLayout()->addElement(
      0, 0, new QCPTextElement(&plot, title, QFont(QString(), 11, QFont::Bold)));
  double top = 0;
  std::uint64_t longest = 1;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const ComparedRun& run = *runs[i];
    const bool single = runs.size() == 1;
    QVector<double> keys, reservedMax, allocatedMax, allocatedMin;
    for (const auto& b : run.timeline) {
      keys.push_back(static_cast<double>(b.first_event));
      reservedMax.push_back(static_cast<double>(b.max.reserved));
      allocatedMax.push_back(static_cast<double>(b.max.allocated));
      allocatedMin.push_back(static_cast<double>(b.min.allocated));
      top = std::max(top, static_cast<double>(b.max.reserved));
    }
    if (!run.timeline.empty()) {
      keys.push_back(static_cast<double>(run.timeline.back().end_event));
      reservedMax.push_back(reservedMax.back());
      allocatedMax.push_back(allocatedMax.back());
      allocatedMin.push_back(allocatedMin.back());
    }
    longest = std::max(longest, run.record.event_count);
    const QString prefix =
        single ? QString() : QString::fromStdString(run.record.name) + QStringLiteral(" · ");
    QCPGraph* reserved = plot.addGraph();
    reserved->setName(prefix + QObject::tr("reserved"));
    reserved->setPen(QPen(single ? colors::reserved : colors::run(static_cast<int>(i)), 1.6));
    reserved->setLineStyle(QCPGraph::lsStepLeft);
    reserved->setData(keys, reservedMax, true);
    if (single) {
      QCPGraph* allocated = addBandSeries(&plot, QObject::tr("allocated"), colors::allocated);
      allocated->setData(keys, allocatedMax, true);
      allocated->channelFillGraph()->setData(keys, allocatedMin, true);
    } else {
      QCPGraph* allocated = plot.addGraph();
      allocated->setName(prefix + QObject::tr("allocated"));
      allocated->setPen(QPen(colors::run(static_cast<int>(i)), 1.2, Qt::DashLine));
      allocated->setLineStyle(QCPGraph::lsStepLeft);
      allocated->setData(keys, allocatedMax, true);
    }
  }
  plot.xAxis->setRange(0, static_cast<double>(longest));
  plot.yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);
  plot.replot();
  return plot.toPixmap(kPlotWidth, kPlotHeight).toImage();
}

QString imageSource(const QImage& image, int index, bool embed) {
  if (!embed)
    return QStringLiteral("plot%1.png").arg(index);
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  image.save(&buffer, "PNG");
  return QStringLiteral("data:image/png;base64,") + QString::fromLatin1(png.toBase64());
}
}  // namespace

std::optional<ReportFormat> reportFormatFor(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == QLatin1String("html") || suffix == QLatin1String("htm"))
    return ReportFormat::html;
  if (suffix == QLatin1String("pdf"))
    return ReportFormat::pdf;
  return std::nullopt;
}

ReportData loadReportData(const QString& databasePath, const std::vector<storage::RunId>& runs,
                          const JobContext* job) {
  ReportData data;
  data.databasePath = databasePath;
  data.comparison = loadComparison(databasePath, runs, 1200, job);
  {
    // A rank's run brings its job's imbalance table, once per job.
    auto store =
        storage::open_run_store(databasePath.toStdString(), storage::OpenMode::read_only, true);
    std::vector<std::int64_t> seen;
    for (const storage::RunId run : runs) {
      const auto owner = storage::job_of_run(*store, run);
      if (!owner || std::find(seen.begin(), seen.end(), owner->first.id.value) != seen.end())
        continue;
      seen.push_back(owner->first.id.value);
      data.jobViews.push_back(loadJobView(databasePath, owner->first.id, 600, job));
      data.jobs.push_back(data.jobViews.back().balance);
    }
  }
  for (const ComparedRun& compared : data.comparison.runs) {
    ReportRun run;
    run.run = compared;
    const RunOverview overview = loadOverview(databasePath, compared.record.id, job);
    for (std::size_t i = 0; i < std::min(kMaxOomsPerRun, overview.oomEvents.size()); ++i) {
      const std::uint64_t index = overview.oomEvents[i];
      const SegmentSnapshotAt state = loadSegmentSnapshot(databasePath, compared.record.id, index);
      const SegmentMapSummary& summary = state.summary;
      OomFinding finding;
      finding.eventIndex = index;
      finding.request = overview.oomDetails[i].size;
      finding.deviceFree = overview.oomDetails[i].addr;
      finding.reserved = summary.reserved;
      finding.live = summary.live;
      finding.freeCached = summary.freeInSplit + summary.freeWhole;
      finding.largestFree = summary.largestFree;
      run.ooms.push_back(finding);
    }
    if (!overview.oomEvents.empty()) {
      if (job && job->cancelled())
        return data;
      try {
        run.postMortem = loadPostMortem(databasePath, compared.record.id, false, job);
      } catch (const std::exception& error) {
        run.postMortemError = QString::fromUtf8(error.what());
      }
    }
    data.runs.push_back(std::move(run));
  }
  return data;
}

std::vector<QImage> renderReportPlots(const ReportData& data) {
  std::vector<QImage> plots;
  for (const ReportRun& run : data.runs)
    plots.push_back(renderPlot({&run.run}, QString::fromStdString(run.run.record.name)));
  if (data.runs.size() >= 2) {
    std::vector<const ComparedRun*> all;
    for (const ReportRun& run : data.runs)
      all.push_back(&run.run);
    plots.push_back(
        renderPlot(all, QObject::tr("All runs: reserved (solid) and allocated (dashed)")));
  }
  for (const JobViewData& job : data.jobViews)
    plots.push_back(renderJobMultiples(job, JobAlignment::time, 1200));
  return plots;
}

namespace {

// The engine's verdict per OOM (analysis::diagnose through the post-mortem page's loader) and
// the what-if table, so the report says what the OOM post-mortem page says.
QString postMortemHtml(const PostMortemData& data) {
  const auto bytes = [](Bytes value) { return formatBytes(static_cast<double>(value)); };
  QString html;
  for (const analysis::OomPostMortem& oom : data.postMortems) {
    html += QStringLiteral("<p><b>%1</b> ")
                .arg(QObject::tr("Event %1: %2")
                         .arg(formatCount(oom.event_index),
                              QString::fromUtf8(
                                  analysis::to_string(oom.cause).data(),
                                  static_cast<qsizetype>(analysis::to_string(oom.cause).size()))));
    html += describeFailingRequest(oom).toHtmlEscaped() + QStringLiteral(". ") +
            QString::fromStdString(oom.pytorch_figures()).toHtmlEscaped() +
            QStringLiteral("</p>\n<ul>\n");
    if (&oom == &data.postMortems.front() && data.shortfall() > 0)
      html += QStringLiteral("<li>%1</li>\n")
                  .arg(QObject::tr("%1 short: only using less memory helps.")
                           .arg(bytes(data.shortfall())));
    for (const std::string& sentence : oom.evidence)
      html += QStringLiteral("<li>%1</li>\n").arg(QString::fromStdString(sentence).toHtmlEscaped());
    html += QStringLiteral("</ul>\n");
  }
  if (!data.whatIfError.isEmpty())
    html += QStringLiteral("<p>%1</p>\n")
                .arg(QObject::tr("The what-if table could not be computed: %1")
                         .arg(data.whatIfError.toHtmlEscaped()));
  if (!data.whatIf)
    return html;
  const analysis::WhatIfRow* baseline = data.whatIf->baseline();
  html += QStringLiteral(
              "<h4>%1</h4>\n<table><tr><th>%2</th><th>%3</th><th>%4</th><th>%5</th><th>%6</th>"
              "</tr>\n")
              .arg(QObject::tr("What if (the same requests, replayed)"), QObject::tr("Mitigation"),
                   QObject::tr("PYTORCH_CUDA_ALLOC_CONF"), QObject::tr("Outcome"),
                   QObject::tr("Peak reserved"), QObject::tr("vs. as recorded"));
  for (const analysis::WhatIfRow& row : data.whatIf->rows) {
    const double delta = baseline ? static_cast<double>(row.peak_reserved) -
                                        static_cast<double>(baseline->peak_reserved)
                                  : 0.0;
    const QString outcome =
        !row.error.empty() ? QObject::tr("error: %1").arg(QString::fromStdString(row.error))
                           : (row.ok ? (data.postMortems.empty() ? QObject::tr("fits")
                                                                 : QObject::tr("avoids the OOM"))
                                     : QObject::tr("OOM"));
    html += QStringLiteral(
                "<tr><td>%1</td><td><code>%2</code></td><td>%3</td><td class=num>%4</td>"
                "<td class=num>%5</td></tr>\n")
                .arg(QString::fromStdString(row.name).toHtmlEscaped(),
                     QString::fromStdString(row.alloc_conf).toHtmlEscaped(),
                     outcome.toHtmlEscaped(), bytes(row.peak_reserved),
                     (delta > 0 ? QStringLiteral("+") : QString()) + formatBytes(delta));
  }
  html += QStringLiteral("</table>\n");
  return html;
}

}  // namespace

QString reportHtml(const ReportData& data, const std::vector<QImage>& plots, bool embedImages) {
  QString html;
  html += QStringLiteral(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>FragScope report</title>\n"
      "<style>body{font-family:sans-serif;max-width:1250px;margin:24px auto;color:#202020}"
      "table{border-collapse:collapse;margin:8px 0 18px 0}td,th{border:1px solid #c8cdd2;"
      "padding:4px 8px}th{background:#eef1f4;text-align:left}td.num{text-align:right}"
      "td.diff{background:#fbe3c9}.warn{background:#fdf3d6;border:1px solid #c9a13a;padding:6px}"
      "img{max-width:100%}h2{border-bottom:2px solid #2b7bd6;padding-bottom:2px}</style>"
      "</head><body>\n");
  html +=
      QStringLiteral(
          "<h1>FragScope report</h1>\n<p>Generated %1 by FragScope %2 (%3) from "
          "<code>%4</code>.</p>\n")
          .arg(QDateTime::currentDateTimeUtc().toString(Qt::ISODate), QString::fromLatin1(kVersion),
               QString::fromLatin1(kGitRevision), data.databasePath.toHtmlEscaped());

  // Aligned metrics, one column per run.
  ComparisonModel model;
  model.resetData(data.comparison);
  html += QStringLiteral("<h2>%1</h2>\n<table><tr><th>%2</th>")
              .arg(QObject::tr("Summary"), QObject::tr("Metric"));
  for (int c = 0; c < model.columnCount(); ++c)
    html += QStringLiteral("<th>%1</th>")
                .arg(model.headerData(c, Qt::Horizontal).toString().toHtmlEscaped());
  html += QStringLiteral("</tr>\n");
  for (int r = 0; r < model.rowCount(); ++r) {
    html += QStringLiteral("<tr><th>%1</th>")
                .arg(model.headerData(r, Qt::Vertical).toString().toHtmlEscaped());
    for (int c = 0; c < model.columnCount(); ++c) {
      const QModelIndex index = model.index(r, c);
      html +=
          QStringLiteral("<td class=\"%1\">%2</td>")
              .arg(index.data(ComparisonModel::DiffersRole).toBool() ? QStringLiteral("num diff")
                                                                     : QStringLiteral("num"),
                   index.data().toString().toHtmlEscaped());
    }
    html += QStringLiteral("</tr>\n");
  }
  html += QStringLiteral("</table>\n");
  const QStringList warnings = comparisonWarnings(data.comparison);
  if (!warnings.isEmpty()) {
    html += QStringLiteral("<p class=\"warn\"><b>%1</b><br>")
                .arg(QObject::tr("The runs differ in more than the workload:"));
    for (const QString& warning : warnings)
      html += warning.toHtmlEscaped() + QStringLiteral("<br>");
    html += QStringLiteral("</p>\n");
  }
  // plots: one per run, the overlay when there are two or more runs, then one per job
  const std::size_t overlayPlot = data.runs.size();
  const std::size_t firstJobPlot = overlayPlot + (data.runs.size() >= 2 ? 1 : 0);
  for (std::size_t j = 0; j < data.jobs.size(); ++j) {
    const analysis::JobBalance& balance = data.jobs[j];
    // The Jobs page's imbalance table, the worst rank in bold.
    JobBalanceModel jobModel;
    jobModel.resetData(balance);
    html += QStringLiteral("<h2>%1</h2>\n<p>%2</p>\n<table><tr>")
                .arg(QObject::tr("Job %1").arg(QString::fromStdString(balance.job).toHtmlEscaped()),
                     QObject::tr("Reserved imbalance %1×, allocated imbalance %2× (highest over "
                                 "mean peak).")
                         .arg(balance.reserved_imbalance, 0, 'f', 3)
                         .arg(balance.allocated_imbalance, 0, 'f', 3));
    for (int c = 0; c < jobModel.columnCount(); ++c)
      html += QStringLiteral("<th>%1</th>")
                  .arg(jobModel.headerData(c, Qt::Horizontal).toString().toHtmlEscaped());
    html += QStringLiteral("</tr>\n");
    for (int r = 0; r < jobModel.rowCount(); ++r) {
      const bool worst = r == jobModel.worstRow();
      html += QStringLiteral("<tr>");
      for (int c = 0; c < jobModel.columnCount(); ++c)
        html += QStringLiteral("<td class=\"%1\">%2%3%4</td>")
                    .arg(worst ? QStringLiteral("num diff") : QStringLiteral("num"),
                         worst ? QStringLiteral("<b>") : QString(),
                         jobModel.index(r, c).data().toString().toHtmlEscaped(),
                         worst ? QStringLiteral("</b>") : QString());
      html += QStringLiteral("</tr>\n");
    }
    html += QStringLiteral("</table>\n");
    if (firstJobPlot + j < plots.size())
      html += QStringLiteral("<p><img src=\"%1\" width=\"1200\" alt=\"%2\"></p>\n")
                  .arg(imageSource(plots[firstJobPlot + j], static_cast<int>(firstJobPlot + j),
                                   embedImages),
                       QObject::tr("every rank's allocated and reserved, one scale"));
  }
  if (data.runs.size() >= 2 && overlayPlot < plots.size())
    html += QStringLiteral("<p><img src=\"%1\" width=\"1200\"></p>\n")
                .arg(imageSource(plots[overlayPlot], static_cast<int>(overlayPlot), embedImages));

  for (std::size_t i = 0; i < data.runs.size(); ++i) {
    const ReportRun& run = data.runs[i];
    const storage::RunRecord& r = run.run.record;
    html += QStringLiteral("<h2>%1 %2: %3</h2>\n")
                .arg(QObject::tr("Run"))
                .arg(r.id.value)
                .arg(esc(r.name));
    if (runStartsMidRun(r))
      html += QStringLiteral("<p class=\"warn\">%1</p>\n")
                  .arg(QObject::tr("Mid-run trace: it began after memory was already allocated "
                                   "(or was truncated to its newest events). The state at its "
                                   "first event is rebuilt from the final snapshot and every "
                                   "figure starts from it; what happened before is not in the "
                                   "trace.")
                           .toHtmlEscaped());
    if (i < plots.size())
      html += QStringLiteral("<p><img src=\"%1\" width=\"1200\"></p>\n")
                  .arg(imageSource(plots[i], static_cast<int>(i), embedImages));
    html += QStringLiteral("<table>");
    const auto field = [&html](const QString& name, const QString& value) {
      if (!value.isEmpty())
        html += QStringLiteral("<tr><th>%1</th><td>%2</td></tr>").arg(name, value.toHtmlEscaped());
    };
    field(QObject::tr("Peak allocated"), bytes(static_cast<double>(summaryPeak(r, "allocated"))));
    field(QObject::tr("Peak reserved"), bytes(static_cast<double>(summaryPeak(r, "reserved"))));
    field(QObject::tr("Peak active"), bytes(static_cast<double>(summaryPeak(r, "active"))));
    field(QObject::tr("Events"), formatCount(r.event_count));
    field(QObject::tr("Outcome"), outcomeText(r));
    field(QObject::tr("Source"), QString::fromLatin1(to_string(r.source)));
    field(QObject::tr("Allocator config"), r.alloc_config.empty()
                                               ? QObject::tr("(default)")
                                               : QString::fromStdString(r.alloc_config));
    field(QObject::tr("Device"), QString::fromStdString(r.device_name));
    if (r.capacity)
      field(QObject::tr("Capacity"), bytes(static_cast<double>(r.capacity)));
    field(QObject::tr("PyTorch"), QString::fromStdString(r.environment.torch_version));
    field(QObject::tr("Allocator rules"),
          QString::fromStdString(storage::profile_choice_of(r).describe()));
    field(QObject::tr("CUDA"), QString::fromStdString(r.environment.cuda_version));
    field(QObject::tr("Driver"), QString::fromStdString(r.environment.driver_version));
    field(QObject::tr("GPU"), QString::fromStdString(r.environment.gpu_name));
    field(QObject::tr("FragScope"), QString::fromStdString(r.environment.fragscope_version));
    field(QObject::tr("Host"), QString::fromStdString(r.environment.host));
    field(QObject::tr("Created"), QString::fromStdString(r.created_at));
    html += QStringLiteral("</table>\n");

    if (!run.ooms.empty()) {
      html += QStringLiteral(
                  "<h3>%1</h3>\n<table><tr><th>%2</th><th>%3</th><th>%4</th><th>%5</th>"
                  "<th>%6</th><th>%7</th><th>%8</th></tr>\n")
                  .arg(QObject::tr("Out-of-memory post-mortem"), QObject::tr("Event"),
                       QObject::tr("Request"), QObject::tr("Device free"), QObject::tr("Reserved"),
                       QObject::tr("Live"), QObject::tr("Free cached"),
                       QObject::tr("Largest free block"));
      for (const OomFinding& oom : run.ooms) {
        html +=
            QStringLiteral(
                "<tr><td class=num>%1</td><td class=num>%2</td><td class=num>%3</td>"
                "<td class=num>%4</td><td class=num>%5</td><td class=num>%6</td>"
                "<td class=num>%7</td></tr>\n")
                .arg(formatCount(oom.eventIndex), bytes(static_cast<double>(oom.request)),
                     bytes(static_cast<double>(oom.deviceFree)),
                     bytes(static_cast<double>(oom.reserved)), bytes(static_cast<double>(oom.live)),
                     bytes(static_cast<double>(oom.freeCached)),
                     bytes(static_cast<double>(oom.largestFree)));
      }
      html += QStringLiteral("</table>\n");
      if (run.postMortem)
        html += postMortemHtml(*run.postMortem);
      else if (!run.postMortemError.isEmpty())
        html += QStringLiteral("<p>%1</p>\n")
                    .arg(QObject::tr("The engine could not analyse this run's OOM: %1")
                             .arg(run.postMortemError.toHtmlEscaped()));
    }
  }
  html += QStringLiteral("</body></html>\n");
  return html;
}

bool writeReport(const QString& path, ReportFormat format, const ReportData& data,
                 const std::vector<QImage>& plots, QString* error) {
  if (format == ReportFormat::html) {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
      if (error)
        *error = QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
      return false;
    }
    const QByteArray bytes = reportHtml(data, plots, true).toUtf8();
    if (file.write(bytes) != bytes.size()) {
      if (error)
        *error = QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
      return false;
    }
    return true;
  }
  QPdfWriter writer(path);
  writer.setPageSize(QPageSize(QPageSize::A4));
  writer.setResolution(110);
  writer.setTitle(QObject::tr("FragScope report"));
  writer.setCreator(QStringLiteral("FragScope ") + QString::fromLatin1(kVersion));
  QTextDocument document;
  for (std::size_t i = 0; i < plots.size(); ++i)
    document.addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("plot%1.png").arg(i)),
                         plots[i].scaledToWidth(760, Qt::SmoothTransformation));
  QString html = reportHtml(data, plots, false);
  html.replace(QStringLiteral("width=\"1200\""), QStringLiteral("width=\"760\""));
  document.setHtml(html);
  document.setPageSize(QSizeF(writer.width(), writer.height()));
  document.print(&writer);
  if (!QFileInfo(path).exists() || QFileInfo(path).size() == 0) {
    if (error)
      *error = QObject::tr("Cannot write %1").arg(path);
    return false;
  }
  return true;
}

bool exportReport(const QString& databasePath, const std::vector<storage::RunId>& runs,
                  const QString& path, QString* error) {
  const auto format = reportFormatFor(path);
  if (!format) {
    if (error)
      *error = QObject::tr("%1: a report is .html or .pdf").arg(path);
    return false;
  }
  try {
    const ReportData data = loadReportData(databasePath, runs);
    return writeReport(path, *format, data, renderReportPlots(data), error);
  } catch (const std::exception& failure) {
    if (error)
      *error = QString::fromUtf8(failure.what());
    return false;
  }
}

}  // namespace fragscope::gui
