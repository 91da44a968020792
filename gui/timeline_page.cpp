#include "gui/timeline_page.h"

#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QResizeEvent>
#include <QSvgGenerator>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "gui/format.h"
#include "gui/plot_style.h"
#include "gui/runs_model.h"
#include "gui/segment_map_page.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

namespace {
// Markers beyond this are not drawn one by one (a run that OOMs in a loop would bury the plot).
constexpr std::size_t kMaxOomMarkers = 200;

void setBand(QCPGraph* max, const QVector<double>& keys, const QVector<double>& maxValues,
             const QVector<double>& minValues) {
  max->setData(keys, maxValues, true);
  max->channelFillGraph()->setData(keys, minValues, true);
}

std::int64_t categoryBytes(const storage::CategoryBucket& bucket, Category category) {
  return bucket.bytes[static_cast<std::size_t>(category)];
}
}  // namespace

const std::array<Category, storage::kCategoryCount>& TimelinePage::stackOrder() {
  // What lives the whole run at the bottom, what comes and goes per step on top.
  static const std::array<Category, storage::kCategoryCount> order{
      Category::parameter, Category::optimizer_state, Category::gradient, Category::activation,
      Category::temporary, Category::input,           Category::unknown};
  return order;
}

TimelinePage::TimelinePage(QWidget* parent)
    : QWidget(parent),
      m_plot(new QCustomPlot(this)),
      m_header(new QLabel(this)),
      m_categoriesToggle(new QCheckBox(tr("Categories"), this)),
      m_zoom(new ZoomStack(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  m_header->setTextFormat(Qt::RichText);
  m_header->setText(tr("<i>Select a run in the Runs browser.</i>"));
  auto* headerRow = new QHBoxLayout;
  headerRow->addWidget(m_header, 1);
  m_categoriesToggle->setChecked(true);
  m_categoriesToggle->setEnabled(false);
  m_categoriesToggle->setToolTip(
      tr("Stack memory by allocation category (runs with labels: simulated workloads)"));
  headerRow->addWidget(m_categoriesToggle);
  layout->addLayout(headerRow);
  layout->addWidget(m_plot, 1);
  auto* hint =
      new QLabel(tr("Wheel: zoom · Drag: pan · Shift+drag: zoom to range · Click: set cursor · "
                    "Alt+Left/Right: zoom history"),
                 this);
  hint->setEnabled(false);
  layout->addWidget(hint);

  setUpMemoryPlot(m_plot);
  // With the category stack the legend has up to eleven rows: beside the plot, not over the data.
  placeLegendBeside(m_plot);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->axisRect()->setRangeDrag(Qt::Horizontal);
  m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
  m_plot->yAxis->setLabel(tr("bytes"));
  m_reserved = addBandSeries(m_plot, tr("reserved"), colors::reserved);
  m_active = addBandSeries(m_plot, tr("active"), colors::active);
  m_allocated = addBandSeries(m_plot, tr("allocated"), colors::allocated);
  m_cap = m_plot->addGraph();
  m_cap->setPen(QPen(colors::oom, 1.5, Qt::DashLine));
  m_cap->removeFromLegend();
  // The category stack lies on its own layer under the curves.
  m_plot->addLayer(QStringLiteral("categories"), m_plot->layer(QStringLiteral("main")),
                   QCustomPlot::limBelow);
  for (std::size_t i = 0; i < stackOrder().size(); ++i) {
    const Category category = stackOrder()[i];
    QCPGraph* graph = m_plot->addGraph();
    graph->setLayer(QStringLiteral("categories"));
    // The category's own name (optimizer_state), as the tooltip, the CLI and the report spell it.
    graph->setName(QString::fromUtf8(to_string(category)));
    const QColor color = colors::category(category);
    graph->setPen(QPen(color.darker(115), 1));
    QColor fill = color;
    fill.setAlpha(140);
    graph->setBrush(fill);
    graph->setLineStyle(QCPGraph::lsStepLeft);
    // Each band fills down to the one below it; the bottom one down to zero.
    if (i > 0)
      graph->setChannelFillGraph(m_categoryGraphs[i - 1]);
    m_categoryGraphs[i] = graph;
  }
  updateCategoryVisibility();
  // The legend's widest entries: a category, or a per-process cap ("1023 GiB allowed").
  QStringList legendNames;
  for (const Category category : stackOrder())
    legendNames << QString::fromUtf8(to_string(category));
  for (double unit = static_cast<double>(kMiB); unit <= 0x1p40; unit *= 1024)
    for (const double value : {1023.0, 99.9, 9.99})
      legendNames << formatAllowed(value * unit);
  holdPlotWidths(m_plot, legendNames);
  connect(m_categoriesToggle, &QCheckBox::toggled, this, [this](bool on) {
    updateCategoryVisibility();
    const EventRange range = m_zoom->current();
    if (on && (m_categorySlice.first != range.first || m_categorySlice.end != range.end))
      m_categoryRequery.start();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  });
  m_cursorLine = new QCPItemStraightLine(m_plot);
  m_cursorLine->setPen(QPen(colors::cursor, 1.5, Qt::SolidLine));
  m_cursorLine->setVisible(false);
  m_plot->setMinimumHeight(220);

  m_requery.setSingleShot(true);
  m_requery.setInterval(40);
  connect(&m_requery, &QTimer::timeout, this, &TimelinePage::requestBuckets);
  // A narrower or wider plot asks for one bucket per pixel again (the layout settles after the
  // first query, and users resize the window).
  m_plot->installEventFilter(this);
  // The axis rect also narrows while the plot keeps its size (wider tick labels once the data
  // arrives): ask again when the last query's bucket count no longer matches its width.
  connect(m_plot, &QCustomPlot::afterLayout, this, [this] {
    if (m_run && m_overview && m_requestedBuckets != 0 && !m_timelineJob.busy() &&
        bucketsOnScreen() != m_requestedBuckets)
      m_requery.start();
  });
  m_categoryRequery.setSingleShot(true);
  m_categoryRequery.setInterval(250);
  connect(&m_categoryRequery, &QTimer::timeout, this, &TimelinePage::requestCategories);
  m_gestureEnd.setSingleShot(true);
  m_gestureEnd.setInterval(400);
  connect(&m_gestureEnd, &QTimer::timeout, m_zoom, &ZoomStack::endGesture);

  connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          [this](const QCPRange& range) { onRangeChanged(range.lower, range.upper); });
  connect(m_zoom, &ZoomStack::zoomChanged, this, [this](EventRange range) {
    m_settingRange = true;
    m_plot->xAxis->setRange(static_cast<double>(range.first), static_cast<double>(range.end));
    m_settingRange = false;
    fitValueAxis(m_plot);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    m_requery.start();
  });
  // Shift+drag draws a rubber band that zooms the event axis only. QCustomPlot emits
  // mouseRelease before it ends the selection, so the mode is reset at the next press, never in
  // the release handler (which would cancel the band before it is accepted).
  connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* event) {
    m_pressPosition = event->pos();
    m_plot->setSelectionRectMode((event->modifiers() & Qt::ShiftModifier) ? QCP::srmCustom
                                                                          : QCP::srmNone);
  });
  connect(m_plot->selectionRect(), &QCPSelectionRect::accepted, this,
          [this](const QRect& band, QMouseEvent*) { zoomToPixels(band.left(), band.right()); });
  connect(m_plot, &QCustomPlot::mouseRelease, this, [this](QMouseEvent* event) {
    m_zoom->endGesture();
    const bool click = (event->pos() - m_pressPosition).manhattanLength() < 4;
    if (click && event->button() == Qt::LeftButton && m_run && m_overview) {
      const double key = m_plot->xAxis->pixelToCoord(event->pos().x());
      setCursorEvent(static_cast<std::uint64_t>(std::max(0.0, std::round(key))));
    }
  });
  connect(m_plot, &QCustomPlot::mouseWheel, this, [this] { m_gestureEnd.start(); });
  connect(m_plot, &QCustomPlot::mouseMove, this,
          [this](QMouseEvent* event) { showTooltip(event->pos()); });
}

TimelinePage::~TimelinePage() = default;

void TimelinePage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  clear();
}

void TimelinePage::clear() {
  m_hoverJob.cancel();
  m_hover.reset();
  m_overviewJob.cancel();
  m_timelineJob.cancel();
  m_categoryJob.cancel();
  m_requery.stop();
  m_categoryRequery.stop();
  m_run.reset();
  m_overview.reset();
  m_slice = {};
  m_categorySlice = {};
  m_labelled.reset();
  for (QCPGraph* graph : {m_allocated, m_reserved, m_active})
    setBand(graph, {}, {}, {});
  for (QCPGraph* graph : m_categoryGraphs)
    graph->data()->clear();
  m_cap->data()->clear();
  m_cap->removeFromLegend();
  updateCategoryVisibility();
  for (auto* line : m_oomLines)
    m_plot->removeItem(line);
  m_oomLines.clear();
  m_cursorLine->setVisible(false);
  m_header->setText(tr("<i>Select a run in the Runs browser.</i>"));
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void TimelinePage::setRun(storage::RunId run) {
  clear();
  m_run = run;
  m_header->setText(tr("<i>Loading run %1…</i>").arg(run.value));
  const QString path = m_databasePath;
  // The plot keeps its width whatever the run's labels (holdPlotWidths), so these buckets are
  // one per pixel of the plot that draws them.
  const std::size_t buckets = bucketsOnScreen();
  m_requestedBuckets = buckets;
  m_overviewJob.start(
      [path, run, buckets](const JobContext& job) {
        OpenedRun opened;
        opened.overview = loadOverview(path, run, &job);
        const std::uint64_t end = std::max<std::uint64_t>(opened.overview.record.event_count, 1);
        opened.slice = loadTimeline(path, run, 0, end, buckets);
        opened.categories = loadCategoryTimeline(path, run, 0, end, buckets, &job);
        return opened;
      },
      [this](OpenedRun opened) { showOpenedRun(std::move(opened)); },
      [this](const QString& message) {
        m_header->setText(tr("<b>Could not load the run:</b> %1").arg(message.toHtmlEscaped()));
        emit errorOccurred(message);
      });
}

void TimelinePage::showOpenedRun(OpenedRun opened) {
  // The overview resets the zoom to the whole run, which is what the slices cover: they are
  // drawn at once instead of being asked for again.
  const std::uint64_t cursor = opened.overview.oomEvents.empty()
                                   ? opened.overview.peakCursor
                                   : opened.overview.oomEvents.front();
  showOverview(std::move(opened.overview));
  const EventRange range = m_zoom->current();
  if (opened.slice.first == range.first && opened.slice.end == range.end) {
    m_requery.stop();
    showCategories(std::move(opened.categories));
    // Laid out now, so that whoever waits for dataReady finds the axes where they are drawn.
    showSlice(std::move(opened.slice), true);
    // The plot's width settled with that layout: ask again when the buckets no longer fit it.
    if (m_slice.buckets.size() >
        static_cast<std::size_t>(std::max(64, m_plot->axisRect()->width())))
      m_requery.start();
  }
  // The other pages start their work once the curves are on screen.
  emit overviewReady(*m_overview);
  // Open at the first OOM when there is one: that is what the user came to see; otherwise at
  // the peak of allocated memory (the last event of a finished run has everything freed).
  setCursorEvent(cursor);
}

void TimelinePage::showOverview(RunOverview overview) {
  m_overview = std::move(overview);
  const storage::RunRecord& record = m_overview->record;
  QString header =
      tr("<b>%1</b> &nbsp;·&nbsp; %2 events &nbsp;·&nbsp; peak allocated %3 "
         "&nbsp;·&nbsp; peak reserved %4")
          .arg(QString::fromStdString(record.name).toHtmlEscaped(), formatCount(record.event_count),
               formatBytes(static_cast<double>(summaryPeak(record, "allocated"))),
               formatBytes(static_cast<double>(summaryPeak(record, "reserved"))));
  if (runStartsMidRun(record))
    header += tr(" &nbsp;·&nbsp; <span style='color:%1' title='%2'><b>starts mid-run</b></span>")
                  .arg(colors::oom.name(),
                       tr("the state at the trace's first event is rebuilt from the final "
                          "snapshot; what happened before it is not in the trace"));
  if (const QStringList warnings = runImportWarnings(record); !warnings.isEmpty()) {
    // The first warning in full (it names what is wrong); the rest in the tooltip and the list.
    QString shown = warnings.front();
    if (warnings.size() > 1)
      shown += tr(" (and %n more)", nullptr, static_cast<int>(warnings.size() - 1));
    header +=
        tr(" &nbsp;·&nbsp; <span style='color:%1' title='%2'><b>import warning:</b> %3</span>")
            .arg(colors::oom.name(), warnings.join(QStringLiteral("\n")).toHtmlEscaped(),
                 shown.toHtmlEscaped());
  }
  if (record.event_count == 0)
    header +=
        tr(" &nbsp;·&nbsp; <b>state only</b>: the snapshot has no trace entries, the "
           "plot shows its one state");
  if (!m_overview->oomEvents.empty())
    header += tr(" &nbsp;·&nbsp; <span style='color:%1'><b>%2 OOM</b></span>")
                  .arg(colors::oom.name())
                  .arg(m_overview->oomEvents.size());
  m_header->setText(header);
  if (const std::optional<Bytes> limit = storage::run_memory_limit(record)) {
    const double y = static_cast<double>(*limit);
    m_cap->setData({0.0, static_cast<double>(std::max<std::uint64_t>(record.event_count, 1))},
                   {y, y}, true);
    m_cap->setName(formatAllowed(y));
    m_cap->addToLegend();
  }
  updateOomMarkers();
  m_zoom->reset({0, std::max<std::uint64_t>(record.event_count, 1)});
}

void TimelinePage::onRangeChanged(double lower, double upper) {
  if (m_settingRange || !m_overview)
    return;
  const EventRange range{static_cast<std::uint64_t>(std::max(0.0, std::floor(lower))),
                         static_cast<std::uint64_t>(std::max(0.0, std::ceil(upper)))};
  // Wheel and drag merge into one history entry per gesture.
  m_zoom->zoomContinuous(range);
}

void TimelinePage::zoomToPixels(int left, int right) {
  if (!m_overview)
    return;
  const double a = m_plot->xAxis->pixelToCoord(std::min(left, right));
  const double b = m_plot->xAxis->pixelToCoord(std::max(left, right));
  // A rubber band is one deliberate step in the history.
  m_zoom->zoomTo({static_cast<std::uint64_t>(std::max(0.0, std::floor(a))),
                  static_cast<std::uint64_t>(std::max(0.0, std::ceil(b)))});
}

bool TimelinePage::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_plot && event->type() == QEvent::Resize && m_run && m_overview) {
    const auto* resize = static_cast<QResizeEvent*>(event);
    if (resize->size().width() != resize->oldSize().width())
      m_requery.start();
  }
  return QWidget::eventFilter(watched, event);
}

std::size_t TimelinePage::bucketsOnScreen() const {
  return static_cast<std::size_t>(std::max(64, m_plot->axisRect()->width()));
}

void TimelinePage::requestBuckets() {
  if (!m_run || !m_overview)
    return;
  const EventRange range = m_zoom->current();
  const std::size_t buckets = bucketsOnScreen();
  m_requestedBuckets = buckets;
  const QString path = m_databasePath;
  const storage::RunId run = *m_run;
  m_timelineJob.start(
      [path, run, range, buckets](const JobContext&) {
        return loadTimeline(path, run, range.first, range.end, buckets);
      },
      [this](TimelineSlice slice) { showSlice(std::move(slice)); },
      [this](const QString& message) { emit errorOccurred(message); });
  // A run known to have no labels has no stack to ask for.
  if (m_labelled != false)
    m_categoryRequery.start();
}

void TimelinePage::requestCategories() {
  // Nothing to ask for a run known to have no labels, nor while the stack is switched off.
  if (!m_run || !m_overview || m_labelled == false ||
      (m_labelled == true && !m_categoriesToggle->isChecked()))
    return;
  const EventRange range = m_zoom->current();
  const std::size_t buckets = static_cast<std::size_t>(std::max(64, m_plot->axisRect()->width()));
  const QString path = m_databasePath;
  const storage::RunId run = *m_run;
  m_categoryJob.start(
      [path, run, range, buckets](const JobContext& job) {
        return loadCategoryTimeline(path, run, range.first, range.end, buckets, &job);
      },
      [this](CategorySlice slice) { showCategories(std::move(slice)); },
      [this](const QString& message) { emit errorOccurred(message); });
}

void TimelinePage::showCategories(CategorySlice slice) {
  m_categorySlice = std::move(slice);
  m_labelled = m_categorySlice.labelled;
  const std::size_t n = m_categorySlice.buckets.size();
  QVector<double> keys;
  keys.reserve(static_cast<qsizetype>(n + 1));
  for (const storage::CategoryBucket& bucket : m_categorySlice.buckets)
    keys.push_back(static_cast<double>(bucket.first_event));
  if (n > 0)
    keys.push_back(static_cast<double>(m_categorySlice.buckets.back().end_event));
  QVector<double> runningSum(keys.size(), 0.0);
  for (std::size_t i = 0; i < stackOrder().size(); ++i) {
    for (std::size_t b = 0; b < n; ++b)
      runningSum[static_cast<qsizetype>(b)] +=
          static_cast<double>(categoryBytes(m_categorySlice.buckets[b], stackOrder()[i]));
    // Close the last step at the end of its bucket.
    if (n > 0)
      runningSum.back() = runningSum[static_cast<qsizetype>(n - 1)];
    m_categoryGraphs[i]->setData(keys, runningSum, true);
  }
  updateCategoryVisibility();
  fitValueAxis(m_plot);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
  emit categoriesReady();
}

bool TimelinePage::categoriesShown() const {
  return m_labelled == true && m_categoriesToggle->isChecked();
}

void TimelinePage::updateCategoryVisibility() {
  m_categoriesToggle->setEnabled(m_labelled == true);
  const bool shown = categoriesShown();
  for (std::size_t i = 0; i < m_categoryGraphs.size(); ++i) {
    QCPGraph* graph = m_categoryGraphs[i];
    graph->setVisible(shown);
    // A category the range never holds (e.g. "input" in a training run) keeps out of the legend.
    const Category category = stackOrder()[i];
    const bool present = std::any_of(
        m_categorySlice.buckets.begin(), m_categorySlice.buckets.end(),
        [category](const storage::CategoryBucket& b) { return categoryBytes(b, category) != 0; });
    graph->removeFromLegend();
    if (shown && present)
      graph->addToLegend();
  }
}

void TimelinePage::showSlice(TimelineSlice slice, bool replotNow) {
  m_slice = std::move(slice);
  const std::size_t n = m_slice.buckets.size();
  QVector<double> keys;
  keys.reserve(static_cast<qsizetype>(n + 1));
  std::array<QVector<double>, 3> maxValues, minValues;
  for (auto& v : maxValues)
    v.reserve(static_cast<qsizetype>(n + 1));
  for (auto& v : minValues)
    v.reserve(static_cast<qsizetype>(n + 1));
  for (const storage::TimelineBucket& bucket : m_slice.buckets) {
    keys.push_back(static_cast<double>(bucket.first_event));
    maxValues[0].push_back(static_cast<double>(bucket.max.allocated));
    maxValues[1].push_back(static_cast<double>(bucket.max.reserved));
    maxValues[2].push_back(static_cast<double>(bucket.max.active));
    minValues[0].push_back(static_cast<double>(bucket.min.allocated));
    minValues[1].push_back(static_cast<double>(bucket.min.reserved));
    minValues[2].push_back(static_cast<double>(bucket.min.active));
  }
  // A state-only snapshot (no trace entries) has one state: drawn flat across the plot at its
  // own figures, not an empty 0 .. 1000 B axis.
  if (n == 0 && m_overview && m_overview->record.event_count == 0) {
    const storage::RunRecord& record = m_overview->record;
    keys = {0.0, 1.0};
    const std::array<const char*, 3> series{"allocated", "reserved", "active"};
    for (std::size_t i = 0; i < series.size(); ++i) {
      const auto value = static_cast<double>(summaryPeak(record, series[i]));
      maxValues[i] = {value, value};
      minValues[i] = {value, value};
    }
  }
  // Close the last step at the end of its bucket.
  if (n > 0) {
    keys.push_back(static_cast<double>(m_slice.buckets.back().end_event));
    for (auto* values : {&maxValues, &minValues})
      for (auto& v : *values)
        v.push_back(v.back());
  }
  setBand(m_allocated, keys, maxValues[0], minValues[0]);
  setBand(m_reserved, keys, maxValues[1], minValues[1]);
  setBand(m_active, keys, maxValues[2], minValues[2]);
  fitValueAxis(m_plot);
  m_plot->replot(replotNow ? QCustomPlot::rpRefreshHint : QCustomPlot::rpQueuedReplot);
  emit dataReady();
}

void TimelinePage::updateOomMarkers() {
  for (auto* line : m_oomLines)
    m_plot->removeItem(line);
  m_oomLines.clear();
  if (!m_overview)
    return;
  const auto& ooms = m_overview->oomEvents;
  for (std::size_t i = 0; i < std::min(ooms.size(), kMaxOomMarkers); ++i) {
    auto* line = new QCPItemStraightLine(m_plot);
    const double key = static_cast<double>(ooms[i]);
    line->point1->setCoords(key, 0);
    line->point2->setCoords(key, 1);
    line->setPen(QPen(colors::oom, 1.2, Qt::DashLine));
    m_oomLines.push_back(line);
  }
}

void TimelinePage::setCursorEvent(std::uint64_t event) {
  if (!m_overview)
    return;
  event = std::min(event, m_overview->record.event_count);
  const bool changed = event != m_cursorEvent || !m_cursorLine->visible();
  m_cursorEvent = event;
  m_cursorLine->point1->setCoords(static_cast<double>(event), 0);
  m_cursorLine->point2->setCoords(static_cast<double>(event), 1);
  m_cursorLine->setVisible(true);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
  if (changed)
    emit cursorEventChanged(event);
}

namespace {
// A hover reads at most this many events to find the bucket's largest allocation: a bucket of a
// zoomed-out 1.2M-event run spans ~1000, one drawn at a pixel per event spans one.
constexpr std::uint64_t kHoverEvents = 1 << 16;
}  // namespace

void TimelinePage::showTooltip(const QPoint& position) {
  m_hoverPosition = position;
  const QString text = tooltipText(position);
  if (text.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(m_plot->mapToGlobal(position), text, m_plot);
}

QString TimelinePage::tooltipText(const QPoint& position) {
  const double key = m_plot->xAxis->pixelToCoord(position.x());
  const auto it = std::upper_bound(m_slice.buckets.begin(), m_slice.buckets.end(), key,
                                   [](double k, const storage::TimelineBucket& b) {
                                     return k < static_cast<double>(b.end_event);
                                   });
  if (it == m_slice.buckets.end() || key < static_cast<double>(it->first_event))
    return {};
  const auto& b = *it;
  QString text = tr("<b>events %1 – %2</b><table>"
                    "<tr><td>allocated</td><td align=right>%3</td><td>(min %4)</td></tr>"
                    "<tr><td>reserved</td><td align=right>%5</td><td>(min %6)</td></tr>"
                    "<tr><td>active</td><td align=right>%7</td><td>(min %8)</td></tr></table>")
                     .arg(formatCount(b.first_event), formatCount(b.end_event - 1),
                          formatBytes(static_cast<double>(b.max.allocated)),
                          formatBytes(static_cast<double>(b.min.allocated)),
                          formatBytes(static_cast<double>(b.max.reserved)),
                          formatBytes(static_cast<double>(b.min.reserved)),
                          formatBytes(static_cast<double>(b.max.active)),
                          formatBytes(static_cast<double>(b.min.active)));
  if (categoriesShown()) {
    const auto& categories = m_categorySlice.buckets;
    const auto at = std::upper_bound(categories.begin(), categories.end(), key,
                                     [](double k, const storage::CategoryBucket& c) {
                                       return k < static_cast<double>(c.end_event);
                                     });
    if (at != categories.end() && key >= static_cast<double>(at->first_event)) {
      text += tr("<b>by category</b> (at event %1)<table>").arg(formatCount(at->peak_event));
      // Top of the stack first, as drawn.
      for (auto category = stackOrder().rbegin(); category != stackOrder().rend(); ++category) {
        const std::int64_t bytes = categoryBytes(*at, *category);
        if (bytes != 0)
          text +=
              tr("<tr><td><span style='color:%1'>■</span> %2</td><td align=right>%3</td></tr>")
                  .arg(colors::category(*category).name(), QString::fromUtf8(to_string(*category)),
                       formatBytes(static_cast<double>(bytes)));
      }
      text += tr("<tr><td>total</td><td align=right>%1</td></tr></table>")
                  .arg(formatBytes(static_cast<double>(at->total())));
    }
  }
  if (b.t0_us != 0 && m_overview && m_overview->firstTimeUs != 0)
    text +=
        tr("t = %1 s").arg(static_cast<double>(b.t0_us - m_overview->firstTimeUs) / 1e6, 0, 'f', 3);
  // The allocation behind the bucket's curve: the largest one made in it, with its stack (what
  // memory_viz shows on hover), looked up off the GUI thread once per bucket.
  if (m_hover && m_hover->firstEvent == b.first_event && m_hover->endEvent == b.end_event) {
    if (m_hover->index) {
      text += tr("<br><b>largest allocation here:</b> %1 at event %2")
                  .arg(formatBytes(static_cast<double>(m_hover->event.size)),
                       formatCount(*m_hover->index));
      text += m_hover->frames.empty() ? tr("<br><i>no stack recorded for it</i>")
                                      : tr("<br><b>allocated at</b> (innermost first):") +
                                            stackHtml(m_hover->frames, 12);
    }
  } else if (m_run && b.end_event - b.first_event <= kHoverEvents) {
    const QString path = m_databasePath;
    const storage::RunId run = *m_run;
    const std::uint64_t first = b.first_event, end = b.end_event;
    m_hoverJob.start(
        [path, run, first, end](const JobContext&) {
          HoverAllocation found;
          found.firstEvent = first;
          found.endEvent = end;
          auto store = openReader(path);
          const auto events = store->events(run, first, end);
          for (std::size_t i = 0; i < events.size(); ++i)
            if (events[i].action == TraceAction::alloc &&
                (!found.index || events[i].size > found.event.size)) {
              found.index = first + i;
              found.event = events[i];
            }
          if (found.index && found.event.frames.value != 0)
            found.frames = store->frame_stack(run, found.event.frames);
          return found;
        },
        [this](HoverAllocation found) {
          m_hover = std::move(found);
          if (m_plot->underMouse())
            showTooltip(m_hoverPosition);
        });
  }
  return text;
}

QString TimelinePage::timelineCsv() const {
  QString csv = QStringLiteral(
      "first_event,end_event,t0_us,t1_us,allocated_max,allocated_min,reserved_max,reserved_min,"
      "active_max,active_min\n");
  for (const storage::TimelineBucket& b : m_slice.buckets) {
    csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10\n")
               .arg(b.first_event)
               .arg(b.end_event)
               .arg(b.t0_us)
               .arg(b.t1_us)
               .arg(b.max.allocated)
               .arg(b.min.allocated)
               .arg(b.max.reserved)
               .arg(b.min.reserved)
               .arg(b.max.active)
               .arg(b.min.active);
  }
  return csv;
}

bool TimelinePage::savePlot(const QString& path, QString* error) const {
  const QString suffix = QFileInfo(path).suffix().toLower();
  bool ok = false;
  if (suffix == QLatin1String("png")) {
    ok = m_plot->savePng(path, 1600, 700);
  } else if (suffix == QLatin1String("pdf")) {
    ok = m_plot->savePdf(path, 1600, 700);
  } else if (suffix == QLatin1String("svg")) {
    QSvgGenerator generator;
    generator.setFileName(path);
    generator.setSize(QSize(1600, 700));
    generator.setViewBox(QRect(0, 0, 1600, 700));
    generator.setTitle(tr("FragScope timeline"));
    QCPPainter painter;
    ok = painter.begin(&generator);
    if (ok) {
      m_plot->toPainter(&painter, 1600, 700);
      painter.end();
    }
  } else {
    if (error)
      *error = tr("Unknown plot format \"%1\" for %2: use .png, .svg or .pdf").arg(suffix, path);
    return false;
  }
  if (!ok && error)
    *error = tr("Could not write %1").arg(path);
  return ok;
}

void TimelinePage::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange)
    applyPlotPalette(m_plot, palette());
  QWidget::changeEvent(event);
}

}  // namespace fragscope::gui
