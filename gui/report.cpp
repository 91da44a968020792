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
#include "gui/segment_map_page.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

namespace {
constexpr std::size_t kMaxOomsPerRun = 5;
// Every image is shown this wide in the HTML; the PDF's narrower page scales them all alike.
constexpr int kHtmlImageWidth = 900;
constexpr int kPdfImageWidth = 760;

QString esc(const std::string& text) {
  return QString::fromStdString(text).toHtmlEscaped();
}
QString bytes(double value) {
  return formatBytes(value);
}

// The image as a data URI, or as the resource NAME the PDF's document holds.
QString imageSource(const QImage& image, const QString& name, bool embed) {
  if (!embed)
    return name;
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  image.save(&buffer, "PNG");
  return QStringLiteral("data:image/png;base64,") + QString::fromLatin1(png.toBase64());
}

QString imageTag(const QImage& image, const QString& name, bool embed, const QString& alt) {
  return QStringLiteral("<p><img src=\"%1\" width=\"%2\" alt=\"%3\"></p>\n")
      .arg(imageSource(image, name, embed))
      .arg(kHtmlImageWidth)
      .arg(alt.toHtmlEscaped());
}

// Every image of the report with the name the HTML gives it when not embedded.
std::vector<std::pair<QString, const QImage*>> namedImages(const ReportPlots& plots) {
  std::vector<std::pair<QString, const QImage*>> images;
  for (std::size_t i = 0; i < plots.runs.size(); ++i)
    images.emplace_back(QStringLiteral("run%1.png").arg(i), &plots.runs[i]);
  for (std::size_t i = 0; i < plots.peakMaps.size(); ++i)
    images.emplace_back(QStringLiteral("map%1.png").arg(i), &plots.peakMaps[i]);
  images.emplace_back(QStringLiteral("overlay.png"), &plots.overlay);
  for (std::size_t i = 0; i < plots.jobs.size(); ++i)
    images.emplace_back(QStringLiteral("job%1.png").arg(i), &plots.jobs[i]);
  return images;
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
  data.axis = preferredAxis(data.comparison);
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
      finding.freeCached = summary.freeBytes();
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

namespace {

// The aligned metrics, one column per run, as the Compare page's table.
QString metricsHtml(const ComparisonData& comparison) {
  ComparisonModel model;
  model.resetData(comparison);
  QString html = QStringLiteral("<table><tr><th>%1</th>").arg(QObject::tr("Metric"));
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
  return html + QStringLiteral("</table>\n");
}

// The Compare page's "What differs" tab: workload, allocator and device settings side by side.
QString settingsHtml(const ComparisonData& comparison) {
  const std::vector<SettingRow> rows = settingRows(comparison);
  if (rows.empty())
    return {};
  QString html =
      QStringLiteral("<h3>%1</h3>\n<table><tr><th>%2</th><th>%3</th>")
          .arg(QObject::tr("What differs"), QObject::tr("Group"), QObject::tr("Setting"));
  for (const ComparedRun& run : comparison.runs)
    html += QStringLiteral("<th>%1</th>").arg(compareRunLabel(run).toHtmlEscaped());
  html += QStringLiteral("</tr>\n");
  for (const SettingRow& row : rows) {
    html += QStringLiteral("<tr><td>%1</td><td>%2</td>")
                .arg(row.group.toHtmlEscaped(), row.setting.toHtmlEscaped());
    for (const QString& value : row.values)
      html += QStringLiteral("<td class=\"%1\">%2</td>")
                  .arg(row.differs ? QStringLiteral("diff") : QString(), value.toHtmlEscaped());
    html += QStringLiteral("</tr>\n");
  }
  return html + QStringLiteral("</table>\n");
}

QString jobHtml(const analysis::JobBalance& balance) {
  // The Jobs page's imbalance table, the worst rank in bold.
  JobBalanceModel jobModel;
  jobModel.resetData(balance);
  QString html = QStringLiteral("<h2>%1</h2>\n<p>%2</p>\n<table><tr>")
                     .arg(QObject::tr("Job %1").arg(esc(balance.job)),
                          QObject::tr("Reserved imbalance %1×, allocated imbalance %2× (highest "
                                      "over mean peak).")
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
  return html + QStringLiteral("</table>\n");
}

QString runFieldsHtml(const storage::RunRecord& r) {
  QString html = QStringLiteral("<table>");
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
  field(QObject::tr("Allocator config"),
        r.alloc_conf.empty() ? QObject::tr("(default)") : QString::fromStdString(r.alloc_conf));
  field(QObject::tr("Device"), QString::fromStdString(r.device_name));
  if (r.capacity)
    field(QObject::tr("Capacity"), bytes(static_cast<double>(r.capacity)));
  if (const auto limit = storage::run_memory_limit(r); limit && *limit != r.capacity)
    field(QObject::tr("Memory limit"), formatAllowed(static_cast<double>(*limit)));
  field(QObject::tr("PyTorch"), QString::fromStdString(r.environment.torch_version));
  field(QObject::tr("Allocator rules"),
        QString::fromStdString(storage::profile_choice_of(r).describe()));
  field(QObject::tr("CUDA"), QString::fromStdString(r.environment.cuda_version));
  field(QObject::tr("Driver"), QString::fromStdString(r.environment.driver_version));
  field(QObject::tr("GPU"), QString::fromStdString(r.environment.gpu_name));
  field(QObject::tr("FragScope"), QString::fromStdString(r.environment.fragscope_version));
  field(QObject::tr("Host"), QString::fromStdString(r.environment.host));
  field(QObject::tr("Created"), QString::fromStdString(r.created_at));
  return html + QStringLiteral("</table>\n");
}

QString oomTableHtml(const ReportRun& run) {
  QString html =
      QStringLiteral(
          "<h3>%1</h3>\n<table><tr><th>%2</th><th>%3</th><th>%4</th><th>%5</th>"
          "<th>%6</th><th>%7</th><th>%8</th></tr>\n")
          .arg(QObject::tr("Out-of-memory post-mortem"), QObject::tr("Event"),
               QObject::tr("Request"), QObject::tr("Device free"), QObject::tr("Reserved"),
               QObject::tr("Live"), QObject::tr("Free cached"), QObject::tr("Largest free block"));
  for (const OomFinding& oom : run.ooms)
    html += QStringLiteral(
                "<tr><td class=num>%1</td><td class=num>%2</td><td class=num>%3</td>"
                "<td class=num>%4</td><td class=num>%5</td><td class=num>%6</td>"
                "<td class=num>%7</td></tr>\n")
                .arg(formatCount(oom.eventIndex), bytes(static_cast<double>(oom.request)),
                     bytes(static_cast<double>(oom.deviceFree)),
                     bytes(static_cast<double>(oom.reserved)), bytes(static_cast<double>(oom.live)),
                     bytes(static_cast<double>(oom.freeCached)),
                     bytes(static_cast<double>(oom.largestFree)));
  html += QStringLiteral("</table>\n");
  if (run.postMortem)
    html += postMortemHtml(*run.postMortem);
  else if (!run.postMortemError.isEmpty())
    html += QStringLiteral("<p>%1</p>\n")
                .arg(QObject::tr("The engine could not analyse this run's OOM: %1")
                         .arg(run.postMortemError.toHtmlEscaped()));
  return html;
}

QString peakMapHtml(const ComparedRun& run, const QImage& map, std::size_t index, bool embed) {
  if (!run.atPeak || map.isNull())
    return QStringLiteral("<p><i>%1</i></p>\n")
        .arg(QObject::tr("The segment layout could not be rebuilt from this run's events (a "
                         "truncated trace)."));
  const SegmentMapSummary& summary = run.atPeak->summary;
  return QStringLiteral("<p class=\"caption\">%1<br>%2</p>\n")
             .arg(QObject::tr("Segment map at the reserved peak, after event %1: %2 reserved in %3 "
                              "segments, %4 live, largest free block %5.")
                      .arg(formatCount(run.atPeak->eventIndex),
                           bytes(static_cast<double>(summary.reserved)))
                      .arg(summary.segments + summary.expandableRanges)
                      .arg(bytes(static_cast<double>(summary.live)),
                           bytes(static_cast<double>(summary.largestFree))),
                  pieceLegendHtml()) +
         imageTag(map, QStringLiteral("map%1.png").arg(index), embed,
                  QObject::tr("segment map of %1 at its reserved peak").arg(compareRunLabel(run)));
}

}  // namespace

QString reportHtml(const ReportData& data, const ReportPlots& plots, bool embedImages) {
  const QString family = reportFont(10).family().toHtmlEscaped();
  QString html;
  html += QStringLiteral(
              "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>FragScope report"
              "</title>\n<style>body{font-family:'%1',sans-serif;font-size:10pt;max-width:960px;"
              "margin:24px auto;color:#202020}table{border-collapse:collapse;margin:8px 0 18px 0}"
              "td,th{border:1px solid #c8cdd2;padding:3px 6px}th{background-color:#eef1f4;"
              "text-align:left}td.num{text-align:right}td.diff{background-color:#fbe3c9}"
              ".warn{background-color:#fdf3d6;border:1px solid #c9a13a;padding:6px}"
              ".story{background-color:#eef4fb;border:1px solid #2b7bd6;padding:6px}"
              ".caption{color:#404040}img{max-width:100%}h1,h2,h3{font-family:'%1',sans-serif}"
              "h2{border-bottom:2px solid #2b7bd6;padding-bottom:2px}"
              "h2.run{page-break-before:always}</style>"
              "</head><body>\n")
              .arg(family);
  html +=
      QStringLiteral(
          "<h1>FragScope report</h1>\n<p>Generated %1 by FragScope %2 (%3) from "
          "<code>%4</code>.</p>\n")
          .arg(QDateTime::currentDateTimeUtc().toString(Qt::ISODate), QString::fromLatin1(kVersion),
               QString::fromLatin1(kGitRevision), data.databasePath.toHtmlEscaped());
  if (!data.story.isEmpty())
    html += QStringLiteral("<p class=\"story\">%1</p>\n").arg(data.story);

  html += QStringLiteral("<h2>%1</h2>\n").arg(QObject::tr("Summary"));
  html += metricsHtml(data.comparison);
  const QStringList warnings = comparisonWarnings(data.comparison);
  if (!warnings.isEmpty()) {
    html += QStringLiteral("<p class=\"warn\"><b>%1</b><br>")
                .arg(QObject::tr("The runs differ in more than the workload:"));
    for (const QString& warning : warnings)
      html += warning.toHtmlEscaped() + QStringLiteral("<br>");
    html += QStringLiteral("</p>\n");
  }
  if (data.runs.size() >= 2)
    html += settingsHtml(data.comparison);
  if (!plots.overlay.isNull()) {
    html += imageTag(plots.overlay, QStringLiteral("overlay.png"), embedImages,
                     QObject::tr("every run's reserved and allocated memory"));
    QStringList gaps;
    for (const ComparedRun& run : data.comparison.runs)
      if (const QString gap = axisGap(run, data.axis); !gap.isEmpty())
        gaps << gap;
    if (!gaps.isEmpty())
      html += QStringLiteral("<p class=\"caption\"><i>%1</i></p>\n")
                  .arg(QObject::tr("Not on this axis: %1")
                           .arg(gaps.join(QStringLiteral("; ")).toHtmlEscaped()));
  }
  for (std::size_t j = 0; j < data.jobs.size(); ++j) {
    html += jobHtml(data.jobs[j]);
    if (j < plots.jobs.size())
      html += imageTag(plots.jobs[j], QStringLiteral("job%1.png").arg(j), embedImages,
                       QObject::tr("every rank's allocated and reserved, one scale"));
  }

  for (std::size_t i = 0; i < data.runs.size(); ++i) {
    const ReportRun& run = data.runs[i];
    const storage::RunRecord& r = run.run.record;
    // The run's colour, as on the Compare page and in every plot of this report.
    html +=
        QStringLiteral("<h2 class=\"run\"><span style=\"color:%1\">&#9632;</span> %2 %3: %4</h2>\n")
            .arg(colors::run(static_cast<int>(i)).name(), QObject::tr("Run"))
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
    for (const QString& warning : runImportWarnings(r))
      html += QStringLiteral("<p class=\"warn\">%1</p>\n")
                  .arg(QObject::tr("Import warning: %1").arg(warning).toHtmlEscaped());
    if (i < plots.runs.size())
      html += imageTag(plots.runs[i], QStringLiteral("run%1.png").arg(i), embedImages,
                       QObject::tr("%1's memory over time").arg(compareRunLabel(run.run)));
    if (i < plots.peakMaps.size())
      html += peakMapHtml(run.run, plots.peakMaps[i], i, embedImages);
    html += runFieldsHtml(r);
    if (!run.ooms.empty())
      html += oomTableHtml(run);
  }
  html += QStringLiteral("</body></html>\n");
  return html;
}

std::unique_ptr<QTextDocument> reportDocument(const ReportData& data, const ReportPlots& plots,
                                              const QSizeF& pageSize) {
  auto document = std::make_unique<QTextDocument>();
  document->setDefaultFont(reportFont(9));
  for (const auto& [name, image] : namedImages(plots))
    if (!image->isNull())
      document->addResource(QTextDocument::ImageResource, QUrl(name), *image);
  QString html = reportHtml(data, plots, false);
  html.replace(QStringLiteral("width=\"%1\"").arg(kHtmlImageWidth),
               QStringLiteral("width=\"%1\"").arg(kPdfImageWidth));
  document->setHtml(html);
  document->setPageSize(pageSize);
  return document;
}

bool writeReport(const QString& path, ReportFormat format, const ReportData& data,
                 const ReportPlots& plots, QString* error) {
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
  reportDocument(data, plots, QSizeF(writer.width(), writer.height()))->print(&writer);
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
