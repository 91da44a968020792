#pragma once
// QCustomPlot conventions for every plot FragScope draws: byte-unit ticks, the palette of the
// application (light or dark) applied to axes, grid, legend and background, and a helper that
// renders a plot into an image for reports.
#include <QImage>
#include <QPalette>

// qcustomplot.h is big and old-style; it is included here once for the GUI.
#include <qcustomplot.h>

namespace fragscope::gui {

// Ticks at round binary sizes (256 MiB, 1 GiB, ...) labelled with formatBytes().
class ByteTicker : public QCPAxisTicker {
 protected:
  double getTickStep(const QCPRange& range) override;
  QString getTickLabel(double tick, const QLocale& locale, QChar formatChar,
                       int precision) override;
};

// Event-index ticks labelled "1.2M" / "350k".
class EventTicker : public QCPAxisTicker {
 protected:
  QString getTickLabel(double tick, const QLocale& locale, QChar formatChar,
                       int precision) override;
};

void applyPlotPalette(QCustomPlot* plot, const QPalette& palette);
// A fresh plot's common setup: byte ticker on the y axis, event ticker on x, palette, legend.
void setUpMemoryPlot(QCustomPlot* plot);
// Adds a max/min band for one series (max drawn as a line, the area down to min filled faintly).
// Returns the max graph; its valueAxis is the plot's yAxis.
// Moves the legend out of the axis rect into a column at the plot's right, entries at the top.
void placeLegendBeside(QCustomPlot* plot);
QCPGraph* addBandSeries(QCustomPlot* plot, const QString& name, const QColor& color);
// Fits the y axis to the visible data, starting at zero, with headroom.
void fitValueAxis(QCustomPlot* plot);
// Holds the two widths a memory plot's layout would otherwise change with its data at their
// widest: the left value axis's margin at what its widest byte label ("1023 MiB") needs, and the
// legend beside the plot (placeLegendBeside) at the widest of its entries and `legendNames`. The
// axis rect then keeps its width from run to run and zoom to zoom, so buckets asked for one per
// pixel of it before the data is drawn are still one per pixel once the data's labels are laid
// out, and need not be asked for again.
void holdPlotWidths(QCustomPlot* plot, const QStringList& legendNames);

}  // namespace fragscope::gui
