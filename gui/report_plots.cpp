// The report's images: the same curves, OOM crosses and memory-limit lines the Compare page draws,
// each run's segment map at its reserved peak, and the jobs' small multiples; one light palette
// and the report's font in every image, each run in its Compare colour.
#include <QApplication>
#include <QResizeEvent>

#include "gui/compare_views.h"
#include "gui/format.h"
#include "gui/plot_style.h"
#include "gui/report.h"
#include "gui/segment_map_page.h"

namespace fragscope::gui {

namespace {
constexpr int kPlotWidth = 900;
constexpr int kRunPlotHeight = 300;
constexpr int kOverlayHeight = 380;
constexpr int kMapHeight = 230;
constexpr int kJobWidth = 1200;
// Images are drawn at twice their size so the PDF and a zoomed browser stay sharp.
constexpr double kImageScale = 2.0;

QPalette reportPalette() {
  QPalette light = QApplication::palette();
  light.setColor(QPalette::Base, Qt::white);
  light.setColor(QPalette::Window, Qt::white);
  light.setColor(QPalette::Text, QColor(0x20, 0x20, 0x20));
  light.setColor(QPalette::WindowText, QColor(0x20, 0x20, 0x20));
  return light;
}

void applyReportFonts(QCustomPlot* plot) {
  plot->setFont(reportFont(9));
  for (QCPAxis* axis : plot->axisRect()->axes()) {
    axis->setTickLabelFont(reportFont(8));
    axis->setLabelFont(reportFont(9));
  }
  plot->legend->setFont(reportFont(8));
}

// Where the runs' curves span on `axis` (share: always 0-100 %).
QCPRange keyRange(const std::vector<QCPGraph*>& graphs, CompareAxis axis) {
  double left = 0, right = 1;
  for (QCPGraph* graph : graphs) {
    bool found = false;
    const QCPRange keys = graph->getKeyRange(found);
    if (found) {
      left = std::min(left, keys.lower);
      right = std::max(right, keys.upper);
    }
  }
  return {left, axis == CompareAxis::share ? 100.0 : right};
}

// `runs` (indices into data.comparison.runs) on `axis`: reserved solid, allocated dashed, OOMs as
// crosses and each memory limit dotted, on the y scale of all of the report's runs.
QImage renderCurves(const ReportData& data, const std::vector<std::size_t>& runs, CompareAxis axis,
                    const QString& title, int height) {
  QCustomPlot plot;
  plot.resize(kPlotWidth, height);
  setUpMemoryPlot(&plot);
  applyPlotPalette(&plot, reportPalette());
  applyReportFonts(&plot);
  placeLegendBeside(&plot);  // beside the axes, not over the curves' start
  plot.plotLayout()->insertRow(0);
  auto* heading = new QCPTextElement(&plot, title, reportFont(10, true));
  heading->setTextColor(reportPalette().color(QPalette::Text));
  plot.plotLayout()->addElement(0, 0, heading);
  const bool single = runs.size() == 1;
  std::vector<QCPGraph*> reservedGraphs;
  bool oomInLegend = false;
  ComparisonData shown;
  for (const std::size_t i : runs) {
    const ComparedRun& run = data.comparison.runs[i];
    shown.runs.push_back(run);
    const QColor color = colors::run(static_cast<int>(i));
    QCPGraph* reserved = plotRunCurves(&plot, run, color, axis, compareRunLabel(run));
    if (!reserved)
      continue;
    reservedGraphs.push_back(reserved);
    if (single) {
      // One run: name the two curves instead of the run (the title names it).
      reserved->setName(QObject::tr("reserved"));
      QCPGraph* allocated = plot.graph(plot.graphCount() - 1);
      allocated->setName(QObject::tr("allocated (dashed)"));
      allocated->addToLegend();
    }
    if (QCPGraph* ooms = plotRunOoms(&plot, run, color, axis); ooms && !oomInLegend) {
      ooms->setName(QObject::tr("out of memory"));
      ooms->addToLegend();
      oomInLegend = true;
    }
  }
  const QCPRange keys = keyRange(reservedGraphs, axis);
  const double top = comparisonTop(data.comparison);
  plotMemoryLimits(&plot, shown, keys.lower, keys.upper, top);
  plot.xAxis->setTicker(axis == CompareAxis::events ? QSharedPointer<QCPAxisTicker>(new EventTicker)
                                                    : QSharedPointer<QCPAxisTicker>::create());
  plot.xAxis->setLabel(axisLabel(axis));
  plot.xAxis->setRange(keys);
  plot.yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);
  plot.replot();
  return plot.toPixmap(kPlotWidth, height, kImageScale).toImage();
}

QImage renderPeakMap(const SegmentSnapshotAt& state) {
  SegmentMapWidget map;
  map.setPalette(reportPalette());
  map.setFont(reportFont(9));
  map.resize(kPlotWidth, kMapHeight);
  // A widget never shown gets its resize event only when shown; the layout needs it now.
  QResizeEvent resized(map.size(), QSize());
  QCoreApplication::sendEvent(&map, &resized);
  map.setSnapshot(state);
  QImage image(QSize(kPlotWidth, kMapHeight) * kImageScale, QImage::Format_ARGB32_Premultiplied);
  image.setDevicePixelRatio(kImageScale);
  image.fill(Qt::white);
  map.render(&image);
  return image;
}
}  // namespace

QFont reportFont(int pointSize, bool bold) {
  QFont font(QApplication::font().family(), pointSize);
  font.setBold(bold);
  return font;
}

ReportPlots renderReportPlots(const ReportData& data) {
  ReportPlots plots;
  const std::size_t count = data.comparison.runs.size();
  for (std::size_t i = 0; i < count; ++i) {
    const ComparedRun& run = data.comparison.runs[i];
    // A run the chosen axis cannot place (no steps recorded) is drawn by event instead.
    const CompareAxis axis = axisGap(run, data.axis).isEmpty() ? data.axis : CompareAxis::events;
    plots.runs.push_back(renderCurves(data, {i}, axis, compareRunLabel(run), kRunPlotHeight));
    plots.peakMaps.push_back(run.atPeak ? renderPeakMap(*run.atPeak) : QImage());
  }
  if (count >= 2) {
    std::vector<std::size_t> all(count);
    for (std::size_t i = 0; i < count; ++i)
      all[i] = i;
    plots.overlay =
        renderCurves(data, all, data.axis,
                     QObject::tr("All runs: reserved (solid), allocated (dashed)"), kOverlayHeight);
  }
  for (const JobViewData& job : data.jobViews)
    plots.jobs.push_back(renderJobMultiples(job, JobAlignment::time, kJobWidth));
  return plots;
}

}  // namespace fragscope::gui
