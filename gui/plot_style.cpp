#include "gui/plot_style.h"

#include <cmath>

#include "gui/format.h"

namespace fragscope::gui {

double ByteTicker::getTickStep(const QCPRange& range) {
  const double raw = range.size() / std::max(1, tickCount());
  if (raw <= 0)
    return 1;
  double unit = 1;
  while (unit * 1024 <= raw)
    unit *= 1024;
  return cleanMantissa(raw / unit) * unit;
}

QString ByteTicker::getTickLabel(double tick, const QLocale&, QChar, int) {
  return formatBytes(tick);
}

QString EventTicker::getTickLabel(double tick, const QLocale& locale, QChar formatChar,
                                  int precision) {
  const double magnitude = std::fabs(tick);
  if (magnitude >= 1e6)
    return QString::number(tick / 1e6, 'g', 4) + QLatin1Char('M');
  if (magnitude >= 1e4)
    return QString::number(tick / 1e3, 'g', 4) + QLatin1Char('k');
  return QCPAxisTicker::getTickLabel(tick, locale, formatChar, precision);
}

void applyPlotPalette(QCustomPlot* plot, const QPalette& palette) {
  const QColor background = palette.color(QPalette::Base);
  const QColor foreground = palette.color(QPalette::Text);
  QColor grid = foreground;
  grid.setAlpha(40);
  QColor subGrid = foreground;
  subGrid.setAlpha(18);
  plot->setBackground(background);
  for (QCPAxisRect* rect : plot->axisRects())
    rect->setBackground(background);
  for (QCPAxis* axis :
       plot->axisRects().isEmpty() ? QList<QCPAxis*>() : plot->axisRects().constFirst()->axes()) {
    axis->setBasePen(QPen(foreground, 1));
    axis->setTickPen(QPen(foreground, 1));
    axis->setSubTickPen(QPen(foreground, 1));
    axis->setTickLabelColor(foreground);
    axis->setLabelColor(foreground);
    axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    axis->grid()->setSubGridPen(QPen(subGrid, 1, Qt::DotLine));
    axis->grid()->setZeroLinePen(Qt::NoPen);
  }
  if (plot->legend) {
    QColor legendBackground = background;
    legendBackground.setAlpha(220);
    plot->legend->setBrush(legendBackground);
    plot->legend->setTextColor(foreground);
    plot->legend->setBorderPen(QPen(grid));
  }
  plot->replot(QCustomPlot::rpQueuedReplot);
}

void setUpMemoryPlot(QCustomPlot* plot) {
  plot->setNoAntialiasingOnDrag(true);
  plot->yAxis->setTicker(QSharedPointer<ByteTicker>::create());
  plot->xAxis->setTicker(QSharedPointer<EventTicker>::create());
  plot->xAxis->setLabel(QObject::tr("event"));
  plot->legend->setVisible(true);
  plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
  applyPlotPalette(plot, plot->palette());
}

void placeLegendBeside(QCustomPlot* plot) {
  if (!plot->axisRect()->insetLayout()->take(plot->legend))
    return;
  // A column of its own: the legend at the top, an empty element below taking the rest, so the
  // entries stay together instead of spreading over the plot's height.
  auto* side = new QCPLayoutGrid;
  plot->plotLayout()->addElement(0, 1, side);
  plot->plotLayout()->setColumnStretchFactor(1, 0.001);
  side->addElement(0, 0, plot->legend);
  side->addElement(1, 0, new QCPLayoutElement(plot));
  side->setRowStretchFactor(0, 0.001);
  side->setRowStretchFactor(1, 1);
  plot->legend->setMargins(QMargins(6, 2, 6, 2));
  plot->legend->setRowSpacing(0);
  plot->legend->setIconSize(16, 9);
}

QCPGraph* addBandSeries(QCustomPlot* plot, const QString& name, const QColor& color) {
  QCPGraph* max = plot->addGraph();
  max->setName(name);
  max->setPen(QPen(color, 1.6));
  max->setLineStyle(QCPGraph::lsStepLeft);
  QCPGraph* min = plot->addGraph();
  min->setPen(Qt::NoPen);
  min->setLineStyle(QCPGraph::lsStepLeft);
  min->removeFromLegend();
  QColor fill = color;
  fill.setAlpha(60);
  max->setBrush(fill);
  max->setChannelFillGraph(min);
  return max;
}

void fitValueAxis(QCustomPlot* plot) {
  bool found = false;
  QCPRange keys = plot->xAxis->range();
  double top = 0;
  for (int i = 0; i < plot->graphCount(); ++i) {
    const QCPRange range = plot->graph(i)->getValueRange(found, QCP::sdBoth, keys);
    if (found)
      top = std::max(top, range.upper);
  }
  plot->yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);
}

}  // namespace fragscope::gui
