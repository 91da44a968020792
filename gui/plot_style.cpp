#include "gui/plot_style.h"

#include <algorithm>
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

void holdPlotWidths(QCustomPlot* plot, const QStringList& legendNames) {
  // The value axis: its margin as QCPAxis lays it out (padding, outward ticks, the widest tick
  // label, its padding, the rotated axis label), for the widest label formatBytes writes.
  QCPAxis* axis = plot->yAxis;
  // QCustomPlot measures tick labels 0.05 pt larger (its note: QFontMetrics oscillates at exact
  // point sizes).
  QFont tickLabelFont = axis->tickLabelFont();
  if (tickLabelFont.pointSizeF() > 0)
    tickLabelFont.setPointSizeF(tickLabelFont.pointSizeF() + 0.05);
  const QFontMetrics tickFont(tickLabelFont);
  const auto width = [](const QFontMetrics& metrics, const QString& text) {
    return metrics.boundingRect(0, 0, 0, 0, Qt::TextDontClip, text).width();
  };
  // Every shape of label formatBytes writes ("1000 B", "99.9 MiB", "9.99 GiB") in each digit (a
  // font's digits need not be equally wide), the four-digit ones as they are (1000 to 1023), and
  // two pixels for the kerning between different digits.
  int widestLabel = 0;
  for (const char* unit : {"B", "KiB", "MiB", "GiB", "TiB"}) {
    const QString suffix = QLatin1Char(' ') + QLatin1String(unit);
    for (int value = 1000; value < 1024; ++value)
      widestLabel = std::max(widestLabel, width(tickFont, QString::number(value) + suffix));
    for (const char* shape : {"000", "00.0", "0.00"})
      for (char digit = '0'; digit <= '9'; ++digit) {
        QString label = QString::fromLatin1(shape) + suffix;
        label.replace(QLatin1Char('0'), QLatin1Char(digit));
        widestLabel = std::max(widestLabel, width(tickFont, label));
      }
  }
  widestLabel += 2;
  int margin = axis->padding() + std::max({0, axis->tickLengthOut(), axis->subTickLengthOut()}) +
               widestLabel + axis->tickLabelPadding();
  if (!axis->label().isEmpty())
    margin += QFontMetrics(axis->labelFont())
                  .boundingRect(0, 0, 0, 0, Qt::TextDontClip | Qt::AlignHCenter, axis->label())
                  .height() +
              axis->labelPadding();
  QMargins minimum = plot->axisRect()->minimumMargins();
  minimum.setLeft(std::max(minimum.left(), margin));
  plot->axisRect()->setMinimumMargins(minimum);

  // The legend: an entry is its icon, padding and text (measured on an entry it has), so the
  // widest name decides the column's width.
  QCPLegend* legend = plot->legend;
  if (!legend || legend->itemCount() == 0)
    return;
  auto* sample = qobject_cast<QCPPlottableLegendItem*>(legend->item(0));
  if (!sample)
    return;
  const QFontMetrics legendFont(sample->font());
  const QSize icon = legend->iconSize();
  const auto entryText = [&](const QString& name) {
    return legendFont.boundingRect(0, 0, 0, icon.height(), Qt::TextDontClip, name).width();
  };
  // (The item's own override is protected; QCPLayoutElement's is the public entry to it.)
  const int entryFrame =
      static_cast<const QCPLayoutElement*>(sample)->minimumOuterSizeHint().width() -
      entryText(sample->plottable()->name());
  int widestEntry = 0;
  for (const QString& name : legendNames)
    widestEntry = std::max(widestEntry, entryText(name));
  for (int i = 0; i < legend->itemCount(); ++i)
    if (auto* item = qobject_cast<QCPPlottableLegendItem*>(legend->item(i)))
      widestEntry = std::max(widestEntry, entryText(item->plottable()->name()));
  // (Two pixels for kerning, as above: a legend narrower than an entry would clip it.)
  legend->setSizeConstraintRect(QCPLayoutElement::scrOuterRect);
  legend->setMinimumSize(
      entryFrame + widestEntry + 2 + legend->margins().left() + legend->margins().right(), 0);
}

}  // namespace fragscope::gui
