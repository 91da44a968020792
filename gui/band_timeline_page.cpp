#include "gui/band_timeline_page.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QImage>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <utility>

#include "gui/format.h"
#include "gui/plot_style.h"
#include "gui/run_data.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

namespace {
constexpr std::uint64_t kEventsPerRead = 1 << 16;
constexpr std::size_t kMaxOomMarkers = 200;

QColor hashedColour(std::uint64_t key) {
  // Distinct neighbours: the golden-ratio walk round the hue circle, two saturation levels.
  const double hue = std::fmod(static_cast<double>(key) * 0.618033988749895, 1.0);
  return QColor::fromHsvF(static_cast<float>(hue), key % 2 == 0 ? 0.55f : 0.75f,
                          key % 3 == 0 ? 0.80f : 0.92f);
}

QString eventText(std::uint64_t cursor, std::uint64_t eventCount, bool begins) {
  if (begins)
    return cursor == 0 ? QObject::tr("before the trace began")
                       : QObject::tr("event %1").arg(formatCount(cursor - 1));
  return cursor > eventCount ? QObject::tr("never freed in the trace")
                             : QObject::tr("event %1").arg(formatCount(cursor - 1));
}
}  // namespace

BandData loadBandData(const QString& databasePath, storage::RunId run, LifetimeKind kind,
                      const JobContext* job) {
  auto store = openReader(databasePath);
  const storage::RunRecord record = store->run(run);
  LifetimeBuilder builder(kind, store->segment_state(run, 0).state);
  std::vector<Category> byLabel;
  if (kind == LifetimeKind::allocations) {
    for (const storage::RunLabel& label : store->labels(run)) {
      if (byLabel.size() <= label.id.value)
        byLabel.resize(label.id.value + 1, Category::unknown);
      byLabel[label.id.value] = label.label.category;
    }
  }
  BandData data;
  data.run = run;
  data.name = QString::fromStdString(record.name);
  data.limit = storage::run_memory_limit(record);
  std::vector<Category> categories;
  for (std::uint64_t first = 0; first < record.event_count; first += kEventsPerRead) {
    if (job && job->cancelled())
      throw Cancelled{};
    const std::uint64_t end = std::min(record.event_count, first + kEventsPerRead);
    const std::vector<TraceEvent> events = store->events(run, first, end);
    categories.clear();
    if (!byLabel.empty()) {
      for (const LabelId label : store->labels_of_events(run, first, end))
        categories.push_back(label.value < byLabel.size() ? byLabel[label.value]
                                                          : Category::unknown);
    }
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i].action == TraceAction::oom)
        data.oomEvents.push_back(first + i);
    builder.add(events, categories);
    if (job)
      job->progress(static_cast<double>(end) / static_cast<double>(record.event_count));
  }
  data.lifetimes = std::make_shared<const Lifetimes>(std::move(builder).finish());
  data.stacks = std::make_shared<const FrameStacks>(loadFrameStacks(*store, run));
  return data;
}

BandTimelinePage::BandTimelinePage(LifetimeKind kind, QWidget* parent)
    : QWidget(parent),
      m_kind(kind),
      m_header(new QLabel(this)),
      m_colouring(new QComboBox(this)),
      m_plot(new QCustomPlot(this)),
      m_frames(new QTextBrowser(this)) {
  setObjectName(kind == LifetimeKind::allocations ? QStringLiteral("activeMemoryPage")
                                                  : QStringLiteral("segmentTimelinePage"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  auto* headerRow = new QHBoxLayout;
  m_header->setTextFormat(Qt::RichText);
  m_header->setText(tr("<i>Select a run in the Runs browser.</i>"));
  headerRow->addWidget(m_header, 1);
  headerRow->addWidget(new QLabel(tr("Colour by"), this));
  if (kind == LifetimeKind::allocations) {
    m_colouring->addItem(tr("Category"), static_cast<int>(Colouring::category));
    m_colouring->addItem(tr("Stack"), static_cast<int>(Colouring::stack));
    m_colouring->addItem(tr("Allocation"), static_cast<int>(Colouring::each));
  } else {
    m_colouring->addItem(tr("Segment"), static_cast<int>(Colouring::each));
    m_colouring->addItem(tr("Stack"), static_cast<int>(Colouring::stack));
    m_colouring->addItem(tr("Stream"), static_cast<int>(Colouring::stream));
  }
  headerRow->addWidget(m_colouring);
  layout->addLayout(headerRow);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(m_plot);
  m_frames->setObjectName(QStringLiteral("framesPanel"));
  m_frames->setMinimumWidth(220);
  m_frames->setHtml(tr("<i>Click a band to keep its stack here.</i>"));
  split->addWidget(m_frames);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setSizes({1000, 260});
  layout->addWidget(split, 1);
  auto* hint = new QLabel(tr("Wheel: zoom · Drag: pan · Hover: size and stack · Click: keep the "
                             "stack and move the cursor · Double-click: whole run"),
                          this);
  hint->setEnabled(false);
  layout->addWidget(hint);

  setUpMemoryPlot(m_plot);
  m_plot->legend->setVisible(false);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->axisRect()->setRangeDrag(Qt::Horizontal);
  m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
  m_plot->yAxis->setLabel(kind == LifetimeKind::allocations ? tr("live allocations (bytes)")
                                                            : tr("segments (bytes)"));
  m_plot->xAxis->setLabel(tr("event"));
  m_pixmap = new QCPItemPixmap(m_plot);
  m_pixmap->setScaled(true, Qt::IgnoreAspectRatio, Qt::FastTransformation);
  m_pixmap->topLeft->setType(QCPItemPosition::ptPlotCoords);
  m_pixmap->bottomRight->setType(QCPItemPosition::ptPlotCoords);
  m_total = m_plot->addGraph();
  m_total->setPen(QPen(palette().color(QPalette::WindowText), 1));
  m_total->setLineStyle(QCPGraph::lsStepLeft);
  m_cursorLine = new QCPItemStraightLine(m_plot);
  m_cursorLine->setPen(QPen(colors::cursor, 1.5));
  m_cursorLine->setVisible(false);
  // A per-process cap in PyTorch's words ("6.00 GiB allowed"), as on the timeline.
  m_capLine = new QCPItemStraightLine(m_plot);
  m_capLine->setPen(QPen(colors::oom, 1.5, Qt::DashLine));
  m_capLine->setVisible(false);
  m_capLabel = new QCPItemText(m_plot);
  m_capLabel->setColor(colors::oom);
  m_capLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
  m_capLabel->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
  m_capLabel->position->setTypeY(QCPItemPosition::ptPlotCoords);
  m_capLabel->setVisible(false);
  m_plot->setMinimumHeight(220);

  m_rerender.setSingleShot(true);
  m_rerender.setInterval(60);
  connect(&m_rerender, &QTimer::timeout, this, &BandTimelinePage::requestRender);
  connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          [this](const QCPRange& range) {
            if (m_settingRange || !m_data.lifetimes)
              return;
            // Keep the view inside the run.
            const double last = static_cast<double>(m_data.lifetimes->eventCount + 1);
            if (range.lower < 0 || range.upper > last) {
              m_settingRange = true;
              const double width = std::min(range.size(), last);
              const double lower = std::clamp(range.lower, 0.0, last - width);
              m_plot->xAxis->setRange(lower, lower + width);
              m_settingRange = false;
            }
            m_rerender.start();
          });
  connect(m_colouring, &QComboBox::currentIndexChanged, this, [this] { paintImage(); });
  connect(m_plot, &QCustomPlot::mousePress, this,
          [this](QMouseEvent* event) { m_pressPosition = event->pos(); });
  connect(m_plot, &QCustomPlot::mouseRelease, this, [this](QMouseEvent* event) {
    if ((event->pos() - m_pressPosition).manhattanLength() >= 4 ||
        event->button() != Qt::LeftButton || !m_data.lifetimes)
      return;
    select(itemAtPlotPosition(event->pos()));
    const double key = m_plot->xAxis->pixelToCoord(event->pos().x());
    setCursorEvent(static_cast<std::uint64_t>(std::max(0.0, std::round(key))));
    emit cursorEventChanged(m_cursor);
  });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] {
    if (m_data.lifetimes)
      setRange(0, m_data.lifetimes->eventCount + 1);
  });
  connect(m_plot, &QCustomPlot::mouseMove, this,
          [this](QMouseEvent* event) { showTooltip(event->pos()); });
}

BandTimelinePage::~BandTimelinePage() = default;

void BandTimelinePage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  clear();
}

void BandTimelinePage::clear() {
  m_loadJob.cancel();
  m_renderJob.cancel();
  m_rerender.stop();
  m_run.reset();
  m_loaded = false;
  m_data = {};
  m_raster = {};
  m_selected.reset();
  m_pendingSelection.reset();
  m_pixmap->setVisible(false);
  m_total->data()->clear();
  for (auto* line : m_oomLines)
    m_plot->removeItem(line);
  m_oomLines.clear();
  m_cursorLine->setVisible(false);
  m_capLine->setVisible(false);
  m_capLabel->setVisible(false);
  m_frames->setHtml(tr("<i>Click a band to keep its stack here.</i>"));
  m_header->setText(tr("<i>Select a run in the Runs browser.</i>"));
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void BandTimelinePage::setRun(storage::RunId run) {
  if (m_run == run)
    return;
  clear();
  m_run = run;
  // Built when first looked at: a run opened only for its summary costs nothing here.
  if (isVisible())
    load();
  else
    m_header->setText(tr("<i>Run %1: loads when shown.</i>").arg(run.value));
}

void BandTimelinePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (m_run && !m_loaded && !m_loadJob.busy())
    load();
}

void BandTimelinePage::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (m_data.lifetimes)
    m_rerender.start();
}

void BandTimelinePage::load() {
  const storage::RunId run = *m_run;
  const QString path = m_databasePath;
  const LifetimeKind kind = m_kind;
  m_loaded = true;
  m_header->setText(tr("<i>Reading run %1…</i>").arg(run.value));
  m_loadJob.start(
      [path, run, kind](const JobContext& job) { return loadBandData(path, run, kind, &job); },
      [this](BandData data) { showData(std::move(data)); },
      [this](const QString& message) {
        m_header->setText(tr("<b>Could not read the run:</b> %1").arg(message.toHtmlEscaped()));
        emit errorOccurred(message);
      },
      [this, run](double fraction) {
        m_header->setText(
            tr("<i>Reading run %1… %2%</i>").arg(run.value).arg(std::lround(fraction * 100)));
      });
}

void BandTimelinePage::showData(BandData data) {
  m_data = std::move(data);
  const Lifetimes& lifetimes = *m_data.lifetimes;
  // A run without labels has no categories: colour its allocations by stack (or one by one).
  if (m_kind == LifetimeKind::allocations && !lifetimes.labelled)
    m_colouring->setCurrentIndex(lifetimes.hasStacks ? 1 : 2);
  for (std::size_t i = 0; i < std::min(kMaxOomMarkers, m_data.oomEvents.size()); ++i) {
    auto* line = new QCPItemStraightLine(m_plot);
    line->setPen(QPen(colors::oom, 1, Qt::DashLine));
    const double x = static_cast<double>(m_data.oomEvents[i]);
    line->point1->setCoords(x, 0);
    line->point2->setCoords(x, 1);
    m_oomLines.push_back(line);
  }
  if (m_data.limit) {
    const auto y = static_cast<double>(*m_data.limit);
    m_capLine->point1->setCoords(0, y);
    m_capLine->point2->setCoords(1, y);
    m_capLabel->position->setCoords(0.01, y);
    m_capLabel->setText(formatAllowed(y));
    m_capLine->setVisible(true);
    m_capLabel->setVisible(true);
  }
  updateHeader();
  setRange(0, lifetimes.eventCount + 1);
  if (const auto pending = std::exchange(m_pendingSelection, std::nullopt))
    selectLive(*pending);
  emit dataReady();
}

void BandTimelinePage::updateHeader() {
  if (!m_data.lifetimes)
    return;
  const Lifetimes& lifetimes = *m_data.lifetimes;
  const std::int64_t peak = peakTotal(lifetimes, 0, lifetimes.totals.size());
  const auto before =
      static_cast<std::size_t>(std::count_if(lifetimes.items.begin(), lifetimes.items.end(),
                                             [](const Lifetime& l) { return l.beforeTrace(); }));
  QString text =
      (m_kind == LifetimeKind::allocations
           ? tr("<b>%1</b> · %2 allocations · peak %3 requested and live")
           : tr("<b>%1</b> · %2 segments · peak %3 reserved"))
          .arg(m_data.name.toHtmlEscaped())
          .arg(formatCount(lifetimes.items.size()), formatBytes(static_cast<double>(peak)));
  if (before > 0)
    text += tr(" · %1 already live when the trace began (mid-run trace)").arg(formatCount(before));
  if (!m_data.oomEvents.empty())
    text += tr(" · <span style='color:%1'>%n OOM(s)</span>", nullptr,
               static_cast<int>(m_data.oomEvents.size()))
                .arg(colors::oom.name());
  m_header->setText(text);
}

void BandTimelinePage::setRange(std::uint64_t first, std::uint64_t end) {
  if (!m_data.lifetimes)
    return;
  end = std::min(end, m_data.lifetimes->eventCount + 1);
  first = std::min(first, end > 0 ? end - 1 : 0);
  m_settingRange = true;
  m_plot->xAxis->setRange(static_cast<double>(first),
                          static_cast<double>(std::max(end, first + 1)));
  m_settingRange = false;
  requestRender();
}

void BandTimelinePage::requestRender() {
  if (!m_data.lifetimes)
    return;
  m_rerender.stop();
  const QCPRange range = m_plot->xAxis->range();
  const auto first = static_cast<std::uint64_t>(std::max(0.0, std::floor(range.lower)));
  const auto end = static_cast<std::uint64_t>(std::max(0.0, std::ceil(range.upper)));
  const QRect rect = m_plot->axisRect()->rect();
  const int width = std::clamp(rect.width(), 16, 4096);
  const int height = std::clamp(rect.height(), 16, 4096);
  auto lifetimes = m_data.lifetimes;
  const auto limit = static_cast<std::int64_t>(m_data.limit.value_or(0));
  m_renderJob.start(
      [lifetimes, first, end, width, height, limit](const JobContext&) {
        const std::int64_t peak = peakTotal(*lifetimes, first, end);
        // Headroom over the visible peak and the cap line; the rows are laid out for exactly
        // the drawn range.
        const auto top = std::max<std::int64_t>({1, peak + peak / 12, limit + limit / 12});
        return renderBands(*lifetimes, first, end, width, height, top);
      },
      [this](BandRaster raster) { showRaster(std::move(raster)); },
      [this](const QString& message) { emit errorOccurred(message); });
}

void BandTimelinePage::showRaster(BandRaster raster) {
  m_raster = std::move(raster);
  m_plot->yAxis->setRange(0, static_cast<double>(m_raster.maxBytes));
  m_pixmap->topLeft->setCoords(static_cast<double>(m_raster.first),
                               static_cast<double>(m_raster.maxBytes));
  m_pixmap->bottomRight->setCoords(static_cast<double>(m_raster.end), 0);
  // The drawn total: each column's peak, as a line over the bands.
  QVector<double> keys;
  QVector<double> values;
  const double step = m_raster.width > 0
                          ? static_cast<double>(m_raster.end - m_raster.first) / m_raster.width
                          : 1.0;
  for (int x = 0; x < m_raster.width; ++x) {
    keys.push_back(static_cast<double>(m_raster.first) + x * step);
    values.push_back(static_cast<double>(
        m_data.lifetimes->totals[m_raster.cursors[static_cast<std::size_t>(x)]]));
  }
  m_total->setData(keys, values, true);
  paintImage();
  emit rendered();
}

QColor BandTimelinePage::colourOf(std::size_t item) const {
  const Lifetime& lifetime = m_data.lifetimes->items[item];
  switch (static_cast<Colouring>(m_colouring->currentData().toInt())) {
    case Colouring::category:
      return colors::category(lifetime.category);
    case Colouring::stack:
      return lifetime.frames.value == 0 ? QColor(0xa8, 0xb3, 0xbd)
                                        : hashedColour(lifetime.frames.value);
    case Colouring::stream:
      return colors::run(static_cast<int>(lifetime.stream.value));
    case Colouring::each:
      break;
  }
  return lifetime.expandable ? colors::active : hashedColour(item);
}

void BandTimelinePage::paintImage() {
  if (!m_data.lifetimes || m_raster.width == 0) {
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  QImage image(m_raster.width, m_raster.height, QImage::Format_ARGB32);
  image.fill(Qt::transparent);
  std::vector<QRgb> cache(m_data.lifetimes->items.size(), 0);
  for (int y = 0; y < m_raster.height; ++y) {
    auto* line = reinterpret_cast<QRgb*>(image.scanLine(y));
    for (int x = 0; x < m_raster.width; ++x) {
      const auto item = m_raster.itemAt(x, y);
      if (!item)
        continue;
      QRgb& colour = cache[*item];
      if (colour == 0)
        colour = colourOf(*item).rgb();
      QRgb pixel = *item == m_selected ? colors::cursor.rgb() : colour;
      // A darker edge where one band meets another, so neighbours of one colour stay apart.
      if (y > 0 && m_raster.itemAt(x, y - 1) != item)
        pixel = QColor(pixel).darker(140).rgb();
      line[x] = pixel;
    }
  }
  m_pixmap->setPixmap(QPixmap::fromImage(image));
  m_pixmap->setVisible(true);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

std::optional<std::size_t> BandTimelinePage::itemAtPlotPosition(const QPoint& position) const {
  if (m_raster.width == 0 || m_raster.end <= m_raster.first || m_raster.maxBytes <= 0)
    return std::nullopt;
  const double key = m_plot->xAxis->pixelToCoord(position.x());
  const double value = m_plot->yAxis->pixelToCoord(position.y());
  const double span = static_cast<double>(m_raster.end - m_raster.first);
  const int x = static_cast<int>(
      std::floor((key - static_cast<double>(m_raster.first)) / span * m_raster.width));
  const int y = static_cast<int>(
      std::floor((1.0 - value / static_cast<double>(m_raster.maxBytes)) * m_raster.height));
  return m_raster.itemAt(x, y);
}

QString BandTimelinePage::describe(std::size_t item, std::size_t maxFrames) const {
  const Lifetimes& lifetimes = *m_data.lifetimes;
  const Lifetime& lifetime = lifetimes.items[item];
  QString text =
      tr("<b>%1</b> at 0x%2")
          .arg(formatBytes(static_cast<double>(lifetime.size)), QString::number(lifetime.addr, 16));
  if (m_kind == LifetimeKind::allocations && lifetimes.labelled)
    text += QStringLiteral(" · ") + QString::fromUtf8(to_string(lifetime.category));
  if (m_kind == LifetimeKind::segments)
    text += lifetime.expandable ? tr(" · mapped range of an expandable segment")
                                : tr(" · cudaMalloc segment");
  if (lifetime.stream.value != 0)
    text += tr(" · stream %1").arg(lifetime.stream.value);
  text += tr("<br>%1: %2<br>%3: %4")
              .arg(m_kind == LifetimeKind::allocations ? tr("Allocated") : tr("Reserved"),
                   eventText(lifetime.begin, lifetimes.eventCount, true),
                   m_kind == LifetimeKind::allocations ? tr("Freed") : tr("Released"),
                   eventText(lifetime.end, lifetimes.eventCount, false));
  return text + QStringLiteral("<hr>") +
         blockStackHtml(m_data.stacks.get(), lifetime.frames, maxFrames);
}

void BandTimelinePage::showTooltip(const QPoint& position) {
  const auto item = itemAtPlotPosition(position);
  if (!item) {
    QToolTip::hideText();
    return;
  }
  QToolTip::showText(m_plot->mapToGlobal(position), describe(*item, 12), m_plot);
}

void BandTimelinePage::select(std::optional<std::size_t> item) {
  m_selected = item;
  m_frames->setHtml(item ? describe(*item, 0) : tr("<i>Click a band to keep its stack here.</i>"));
  paintImage();
}

void BandTimelinePage::selectLive(std::uint64_t addr) {
  if (!m_data.lifetimes) {
    m_pendingSelection = addr;
    return;
  }
  std::optional<std::size_t> chosen;
  std::pair<bool, Bytes> best{false, 0};
  const std::vector<Lifetime>& items = m_data.lifetimes->items;
  for (std::size_t i = 0; i < items.size() && items[i].begin <= m_cursor; ++i) {
    const Lifetime& item = items[i];
    if (m_cursor >= item.end)
      continue;
    if (addr != 0 && item.addr == addr) {
      chosen = i;
      break;
    }
    if (const std::pair<bool, Bytes> rank{item.frames.value != 0, item.size};
        addr == 0 && rank > best) {
      best = rank;
      chosen = i;
    }
  }
  select(chosen);
}

void BandTimelinePage::setCursorEvent(std::uint64_t event) {
  m_cursor = event;
  const auto x = static_cast<double>(event);
  m_cursorLine->point1->setCoords(x, 0);
  m_cursorLine->point2->setCoords(x, 1);
  m_cursorLine->setVisible(m_data.lifetimes != nullptr);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

bool BandTimelinePage::savePlot(const QString& path, QString* error) const {
  const QString suffix = QFileInfo(path).suffix().toLower();
  bool ok = false;
  if (suffix == QLatin1String("pdf"))
    ok = m_plot->savePdf(path);
  else if (suffix == QLatin1String("png"))
    ok = m_plot->savePng(path);
  else if (error)
    *error = tr("Unknown image format “%1” (use .png or .pdf)").arg(suffix);
  if (!ok && error && error->isEmpty())
    *error = tr("Could not write %1").arg(path);
  return ok;
}

}  // namespace fragscope::gui
