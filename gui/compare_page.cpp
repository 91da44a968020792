#include "gui/compare_page.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSplitter>
#include <QTabWidget>
#include <QVBoxLayout>
#include <cmath>
#include <limits>

#include "gui/compare_views.h"
#include "gui/format.h"
#include "gui/plot_style.h"
#include "gui/run_data.h"
#include "gui/runs_model.h"
#include "gui/segment_map_page.h"
#include "storage/db/stats_at.h"
#include "usecases/compare.h"

namespace fragscope::gui {

namespace {
// Values within this relative distance of the baseline are not highlighted.
constexpr double kDifferenceTolerance = 0.01;

bool differs(double baseline, double value) {
  if (std::isnan(baseline) || std::isnan(value))
    return false;
  const double scale = std::max(std::fabs(baseline), std::fabs(value));
  return scale > 0 && std::fabs(value - baseline) / scale > kDifferenceTolerance;
}

}  // namespace

ComparisonData loadComparison(const QString& databasePath, const std::vector<storage::RunId>& runs,
                              std::size_t buckets, const JobContext* job) {
  ComparisonData data;
  const auto reader = openReader(databasePath);
  const WorkControl control = job ? job->workControl() : WorkControl{};
  // The numbers `fragscope-cli compare` prints, from the same use case.
  usecases::StoredComparison stored =
      usecases::compare_stored_runs(*reader, runs, usecases::kDefaultComparePhases, control);
  data.comparison = std::move(stored.comparison);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (job && job->cancelled())
      break;
    ComparedRun compared;
    const RunOverview overview = loadOverview(databasePath, runs[i], job);
    compared.record = overview.record;
    compared.oomCount = overview.oomEvents.size();
    compared.oomEvents = overview.oomEvents;
    for (const TraceEvent& oom : overview.oomDetails)
      compared.oomTimesUs.push_back(oom.time_us);
    compared.firstTimeUs = overview.firstTimeUs;
    compared.timeline =
        loadTimeline(databasePath, runs[i], 0, overview.record.event_count, buckets).buckets;
    const nlohmann::json& summary = overview.record.summary;
    if (const auto firsts = summary.find("step_first_events");
        firsts != summary.end() && firsts->is_array())
      for (const nlohmann::json& first : *firsts)
        if (first.is_number_unsigned())
          compared.stepFirstEvents.push_back(first.get<std::uint64_t>());
    if (const auto ends = summary.find("step_ends_us"); ends != summary.end() && ends->is_array())
      for (const nlohmann::json& end : *ends)
        if (end.is_number_unsigned())
          compared.stepEndsUs.push_back(end.get<std::uint64_t>());
    compared.profile = std::move(stored.profiles[i]);
    compared.recordedEnvironment = compared.profile->recorded_environment;
    if (!compared.profile->series_only && overview.record.event_count > 0)
      // The state after the event where reserved peaked.
      compared.atPeak = loadSegmentSnapshot(
          databasePath, runs[i],
          std::min<std::uint64_t>(compared.profile->metrics.peak_reserved_event + 1,
                                  overview.record.event_count));
    data.runs.push_back(std::move(compared));
  }
  return data;
}

QStringList comparisonWarnings(const ComparisonData& data) {
  QStringList warnings;
  if (data.runs.size() < 2)
    return warnings;
  const storage::RunRecord& base = data.runs.front().record;
  for (std::size_t i = 1; i < data.runs.size(); ++i) {
    const storage::RunRecord& other = data.runs[i].record;
    const QString who = QString::fromStdString(other.name);
    const auto check = [&](const QString& what, const std::string& a, const std::string& b) {
      if (a != b)
        warnings << QObject::tr("%1: %2 is \"%3\", baseline has \"%4\"")
                        .arg(who, what, QString::fromStdString(b), QString::fromStdString(a));
    };
    check(QObject::tr("allocator config"), base.alloc_conf, other.alloc_conf);
    check(QObject::tr("device"), base.device_name, other.device_name);
    const auto& baseEnv = data.runs.front().recordedEnvironment;
    const auto& otherEnv = data.runs[i].recordedEnvironment;
    if (baseEnv && otherEnv) {
      // Both fingerprinted: the PyTorch build, cuDNN, NCCL, driver, allocator variables and
      // packages, point by point (the same warnings as `fragscope-cli compare`).
      for (const std::string& warning : analysis::environment_warnings(
               "#" + std::to_string(base.id.value) + " " + base.name, *baseEnv,
               "#" + std::to_string(other.id.value) + " " + other.name, *otherEnv))
        warnings << QString::fromStdString(warning);
    } else {
      check(QObject::tr("PyTorch version"), base.environment.torch_version,
            other.environment.torch_version);
      check(QObject::tr("CUDA version"), base.environment.cuda_version,
            other.environment.cuda_version);
      check(QObject::tr("GPU"), base.environment.gpu_name, other.environment.gpu_name);
    }
    if (base.capacity != other.capacity)
      warnings << QObject::tr("%1: capacity %2, baseline %3")
                      .arg(who, formatBytes(static_cast<double>(other.capacity)),
                           formatBytes(static_cast<double>(base.capacity)));
    if (base.source != other.source)
      warnings << QObject::tr("%1: source %2, baseline %3")
                      .arg(who, QString::fromLatin1(to_string(other.source)),
                           QString::fromLatin1(to_string(base.source)));
  }
  return warnings;
}

ComparisonModel::ComparisonModel(QObject* parent) : QAbstractTableModel(parent) {}

int ComparisonModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_metrics.size());
}

int ComparisonModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runNames.size());
}

QVariant ComparisonModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const Metric& metric = m_metrics[static_cast<std::size_t>(index.row())];
  const double value = metric.values[static_cast<std::size_t>(index.column())];
  const double baseline = metric.values.front();
  const bool different = index.column() > 0 && differs(baseline, value);
  switch (role) {
    case Qt::DisplayRole: {
      if (std::isnan(value))
        return QStringLiteral("\u2014");
      const auto text = [&](double v) {
        switch (metric.unit) {
          case Unit::bytes:
            return formatBytes(v);
          case Unit::ratio:
            return QString::number(v, 'f', 3);
          case Unit::times:
            return QStringLiteral("%1\u00d7").arg(v, 0, 'f', 2);
          case Unit::count:
            break;
        }
        return formatCount(static_cast<std::uint64_t>(std::max(v, 0.0)));
      };
      QString shown = text(value);
      if (different && metric.unit == Unit::bytes)
        shown += QStringLiteral("  (%1)").arg(formatBytesDelta(value - baseline));
      else if (different)
        shown += QStringLiteral("  (%1%2)")
                     .arg(value > baseline ? QStringLiteral("+") : QStringLiteral("\u2212"))
                     .arg(text(std::fabs(value - baseline)));
      return shown;
    }
    case SortRole:
    case ValueRole:
      return value;
    case DiffersRole:
      return different;
    case Qt::TextAlignmentRole:
      return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    case Qt::BackgroundRole:
      if (different && !metric.lowerIsBetter)
        return QColor(0xf2, 0xc1, 0x4e, 60);
      if (different)
        return QColor(value > baseline ? QColor(0xe8, 0x6a, 0x5c, 70)
                                       : QColor(0x3b, 0xa5, 0x5c, 70));
      return {};
    default:
      return {};
  }
}

QVariant ComparisonModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || section < 0)
    return {};
  if (orientation == Qt::Horizontal && section < static_cast<int>(m_runNames.size()))
    return section == 0 ? m_runNames[0] + tr(" (baseline)")
                        : m_runNames[static_cast<std::size_t>(section)];
  if (orientation == Qt::Vertical && section < static_cast<int>(m_metrics.size()))
    return m_metrics[static_cast<std::size_t>(section)].name;
  return {};
}

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// "peak reserved" -> "Peak reserved": the CLI's metric names, as a table heading writes them.
QString headingOf(const std::string& name) {
  QString heading = QString::fromStdString(name);
  // cudaMalloc / cudaFree are names, not words.
  if (!heading.isEmpty() && !heading.startsWith(QLatin1String("cuda")))
    heading[0] = heading[0].toUpper();
  return heading;
}
}  // namespace

void ComparisonModel::resetData(const ComparisonData& data) {
  beginResetModel();
  m_runNames.clear();
  m_metrics.clear();
  if (!data.runs.empty()) {
    const auto unitOf = [](const std::string& unit) {
      if (unit == "bytes")
        return Unit::bytes;
      if (unit == "ratio")
        return Unit::ratio;
      if (unit == "x")
        return Unit::times;
      return Unit::count;
    };
    const std::vector<analysis::MetricRow>& rows = data.comparison.metrics;
    const bool measured = !rows.empty() && rows.front().values.size() == data.runs.size();
    if (measured) {
      // Every row `fragscope-cli compare` prints, peak reserved (the headline) first.
      std::vector<const analysis::MetricRow*> ordered;
      for (const analysis::MetricRow& row : rows)
        if (row.name == "peak reserved")
          ordered.insert(ordered.begin(), &row);
        else
          ordered.push_back(&row);
      for (const analysis::MetricRow* row : ordered) {
        Metric metric{headingOf(row->name), unitOf(row->unit), {}};
        for (const auto& value : row->values)
          metric.values.push_back(value ? *value : kNaN);
        m_metrics.push_back(std::move(metric));
      }
    } else {
      // Built by hand: the recorded summary's peaks.
      m_metrics = {{tr("Peak reserved"), Unit::bytes, {}},
                   {tr("Peak allocated"), Unit::bytes, {}},
                   {tr("Peak active"), Unit::bytes, {}},
                   {tr("OOMs"), Unit::count, {}}};
      for (const ComparedRun& run : data.runs) {
        m_metrics[0].values.push_back(static_cast<double>(summaryPeak(run.record, "reserved")));
        m_metrics[1].values.push_back(static_cast<double>(summaryPeak(run.record, "allocated")));
        m_metrics[2].values.push_back(static_cast<double>(summaryPeak(run.record, "active")));
        m_metrics[3].values.push_back(static_cast<double>(run.oomCount));
      }
    }
    Metric unused{tr("Reserved − allocated at peak reserved"), Unit::bytes, {}};
    Metric finalReserved{tr("Final reserved"), Unit::bytes, {}};
    // A run that did not stop at an OOM has more events: different, not worse.
    Metric events{tr("Events"), Unit::count, {}, false};
    for (const ComparedRun& run : data.runs) {
      m_runNames.push_back(compareRunLabel(run));
      // Both counters read at the one event where reserved peaked; unknown without the events.
      const auto atPeak =
          run.profile ? usecases::reserved_unallocated_at_peak(*run.profile) : std::nullopt;
      unused.values.push_back(atPeak ? static_cast<double>(*atPeak) : kNaN);
      const auto final = run.record.summary.find("final");
      finalReserved.values.push_back(final != run.record.summary.end() &&
                                             final->contains("reserved")
                                         ? final->at("reserved").get<double>()
                                         : 0.0);
      events.values.push_back(static_cast<double>(run.record.event_count));
    }
    m_metrics.push_back(std::move(unused));
    m_metrics.push_back(std::move(finalReserved));
    m_metrics.push_back(std::move(events));
    // The CLI's phase lines, when the runs made the same allocations.
    for (const analysis::PhaseRow& phase : data.comparison.phases) {
      if (phase.peak_reserved.size() != data.runs.size())
        continue;
      Metric metric{tr("Phase %1 peak reserved").arg(phase.phase), Unit::bytes, {}};
      for (const Bytes bytes : phase.peak_reserved)
        metric.values.push_back(static_cast<double>(bytes));
      m_metrics.push_back(std::move(metric));
    }
  }
  endResetModel();
}

void ComparisonModel::clearData() {
  resetData({});
}

ComparePage::ComparePage(QWidget* parent)
    : QWidget(parent),
      m_story(new QLabel(this)),
      m_header(new QLabel(this)),
      m_warning(new QLabel(this)),
      m_overlay(new QCustomPlot(this)),
      m_multiples(new QWidget(this)),
      m_multiplesLayout(new QGridLayout(m_multiples)),
      m_model(new ComparisonModel(this)),
      m_table(new QTableView(this)),
      m_settings(new SettingsModel(this)),
      m_settingsTable(new QTableView(this)),
      m_tabs(new QTabWidget(this)),
      m_peakArea(new QScrollArea(this)),
      m_peakMapsBox(new QWidget),
      m_peakLayout(new QGridLayout(m_peakMapsBox)),
      m_axisNote(new QLabel(this)),
      m_overlayAxis(new QComboBox(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  m_header->setTextFormat(Qt::RichText);
  m_header->setWordWrap(true);  // nine runs' names must not widen the window
  m_story->setObjectName(QStringLiteral("story"));
  m_story->setTextFormat(Qt::RichText);
  m_story->setWordWrap(true);
  m_story->hide();
  layout->addWidget(m_story);
  layout->addWidget(m_header);
  m_warning->setWordWrap(true);
  m_warning->setTextFormat(Qt::RichText);
  m_warning->setStyleSheet(QStringLiteral(
      "QLabel { background: rgba(242,193,78,0.25); border: 1px solid #c9a13a; padding: 4px; }"));
  m_warning->hide();
  layout->addWidget(m_warning);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  m_overlayAxis->addItem(tr("Align by event index"));
  m_overlayAxis->addItem(tr("Align by share of each run"));
  m_overlayAxis->addItem(tr("Align by optimizer step"));
  m_overlayAxis->addItem(tr("Align by time"));
  m_overlayAxis->setToolTip(
      tr("Runs of different batch sizes make different numbers of events per step: line them up "
         "by optimizer step, by time, or by the share of their own events"));
  connect(m_overlayAxis, &QComboBox::currentIndexChanged, this, [this] { plotOverlay(); });
  m_axisNote->setObjectName(QStringLiteral("axisNote"));
  m_axisNote->setWordWrap(true);
  auto* bar = new QHBoxLayout;
  bar->addWidget(
      new QLabel(tr("Solid: reserved · dashed: allocated · ✕: OOM · dotted: memory limit"), this));
  bar->addWidget(m_axisNote, 1);
  bar->addWidget(m_overlayAxis);
  layout->addLayout(bar);
  setUpMemoryPlot(m_overlay);
  placeLegendBeside(m_overlay);  // nine runs' names would hide a short run's curve
  m_overlay->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_overlay->axisRect()->setRangeDrag(Qt::Horizontal);
  m_overlay->axisRect()->setRangeZoom(Qt::Horizontal);
  m_overlay->setMinimumHeight(220);
  splitter->addWidget(m_overlay);

  m_table->setModel(m_model);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  m_table->horizontalHeader()->setMinimumSectionSize(110);
  m_table->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->setAlternatingRowColors(true);
  m_tabs->addTab(m_table, tr("Metrics"));
  m_settingsTable->setObjectName(QStringLiteral("whatDiffers"));
  m_settingsTable->setModel(m_settings);
  m_settingsTable->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  m_settingsTable->horizontalHeader()->setMinimumSectionSize(110);
  m_settingsTable->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_tabs->addTab(m_settingsTable, tr("What differs"));
  m_multiplesLayout->setContentsMargins(0, 0, 0, 0);
  m_tabs->addTab(m_multiples, tr("Each run"));
  m_peakArea->setWidgetResizable(true);
  m_peakArea->setWidget(m_peakMapsBox);
  m_tabs->addTab(m_peakArea, tr("Segment maps at peak"));
  splitter->addWidget(m_tabs);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  layout->addWidget(splitter, 1);
  clear();
}

void ComparePage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  clear();
}

void ComparePage::clear() {
  m_job.cancel();
  m_data = {};
  m_model->clearData();
  m_settings->resetData({});
  m_overlay->clearGraphs();
  m_reservedGraphs.clear();
  m_oomGraphs.clear();
  m_limitGraphs.clear();
  m_overlay->replot(QCustomPlot::rpQueuedReplot);
  while (QLayoutItem* item = m_multiplesLayout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  while (QLayoutItem* item = m_peakLayout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  m_peakMaps.clear();
  m_axisNote->clear();
  m_warning->hide();
  m_story->clear();
  m_story->hide();
  m_header->setText(tr("<i>Select two or more runs in the Runs browser and press Compare.</i>"));
}

bool ComparePage::containsRun(storage::RunId run) const {
  return std::any_of(m_data.runs.begin(), m_data.runs.end(),
                     [&](const ComparedRun& compared) { return compared.record.id == run; });
}

void ComparePage::setRuns(const std::vector<storage::RunId>& runs, const QString& story) {
  clear();
  m_story->setText(story);
  m_story->setVisible(!story.isEmpty());
  m_header->setText(tr("<i>Loading %n run(s)…</i>", nullptr, static_cast<int>(runs.size())));
  const QString path = m_databasePath;
  m_job.start(
      [path, runs](const JobContext& job) { return loadComparison(path, runs, 1000, &job); },
      [this](ComparisonData data) { showData(std::move(data)); },
      [this](const QString& message) {
        m_header->setText(tr("<b>Could not load the runs:</b> %1").arg(message.toHtmlEscaped()));
        emit errorOccurred(message);
      });
}

void ComparePage::showData(ComparisonData data) {
  m_data = std::move(data);
  m_model->resetData(m_data);
  m_settings->resetData(m_data);
  // Up to four runs share the width; more scroll sideways rather than wrap or cut their values.
  const auto mode = m_data.runs.size() <= 4 ? QHeaderView::Stretch : QHeaderView::ResizeToContents;
  m_table->horizontalHeader()->setSectionResizeMode(mode);
  m_settingsTable->horizontalHeader()->setSectionResizeMode(mode);
  QStringList names;
  for (const ComparedRun& run : m_data.runs)
    names << compareRunLabel(run).toHtmlEscaped();
  QString header = tr("<b>Comparing %1 runs:</b> %2")
                       .arg(m_data.runs.size())
                       .arg(names.join(QStringLiteral(", ")));
  if (!m_data.comparison.phase_alignment.empty())
    header += QStringLiteral("<br><small>%1</small>")
                  .arg(tr("Phases: %1")
                           .arg(QString::fromStdString(m_data.comparison.phase_alignment))
                           .toHtmlEscaped());
  m_header->setText(header);
  const QStringList warnings = comparisonWarnings(m_data);
  m_warning->setVisible(!warnings.isEmpty());
  if (!warnings.isEmpty())
    m_warning->setText(tr("<b>These runs differ in more than the workload:</b><br>") +
                       warnings.join(QStringLiteral("<br>"))
                           .toHtmlEscaped()
                           .replace(QStringLiteral("&lt;br&gt;"), QStringLiteral("<br>")));

  {
    const QSignalBlocker blocker(m_overlayAxis);
    m_overlayAxis->setCurrentIndex(static_cast<int>(preferredAxis(m_data)));
  }
  plotOverlay();
  showPeakMaps();
  emit dataReady();
}

bool ComparePage::overlayByShare() const {
  return m_overlayAxis->currentIndex() == static_cast<int>(CompareAxis::share);
}

void ComparePage::plotOverlay() {
  m_overlay->clearGraphs();
  m_reservedGraphs.clear();
  m_oomGraphs.clear();
  m_limitGraphs.clear();
  const auto axis = static_cast<CompareAxis>(m_overlayAxis->currentIndex());
  const double top = comparisonTop(m_data);
  double left = 0, right = 1;
  QStringList gaps;
  for (std::size_t i = 0; i < m_data.runs.size(); ++i) {
    const ComparedRun& run = m_data.runs[i];
    const QColor color = colors::run(static_cast<int>(i));
    QCPGraph* reserved = plotRunCurves(m_overlay, run, color, axis, compareRunLabel(run));
    m_reservedGraphs.push_back(reserved);
    m_oomGraphs.push_back(reserved ? plotRunOoms(m_overlay, run, color, axis) : nullptr);
    if (!reserved) {
      gaps << axisGap(run, axis);
      continue;
    }
    bool found = false;
    const QCPRange keys = reserved->getKeyRange(found);
    if (found) {
      left = std::min(left, keys.lower);
      right = std::max(right, keys.upper);
    }
  }
  m_limitGraphs = plotMemoryLimits(m_overlay, m_data, left, right, top);
  m_axisNote->setText(
      gaps.isEmpty()
          ? QString()
          : tr("<i>Not on this axis: %1</i>").arg(gaps.join(QStringLiteral("; ")).toHtmlEscaped()));
  m_overlay->xAxis->setTicker(axis == CompareAxis::events
                                  ? QSharedPointer<QCPAxisTicker>(new EventTicker)
                                  : QSharedPointer<QCPAxisTicker>::create());
  m_overlay->xAxis->setLabel(axisLabel(axis));
  m_overlay->xAxis->setRange(left, axis == CompareAxis::share ? 100.0 : right);
  m_overlay->yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);
  m_overlay->replot(QCustomPlot::rpQueuedReplot);

  // The small multiples follow the overlay's axis; each on the shared y scale.
  while (QLayoutItem* item = m_multiplesLayout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  const int columns = m_data.runs.size() <= 2 ? 2 : (m_data.runs.size() <= 6 ? 3 : 4);
  for (std::size_t i = 0; i < m_data.runs.size(); ++i) {
    const ComparedRun& run = m_data.runs[i];
    auto* small = new QCustomPlot(m_multiples);
    setUpMemoryPlot(small);
    small->legend->setVisible(false);
    small->plotLayout()->insertRow(0);
    auto* title = new QCPTextElement(small, compareRunLabel(run));
    title->setTextColor(palette().color(QPalette::Text));
    small->plotLayout()->addElement(0, 0, title);
    small->xAxis->setLabel(QString());
    small->xAxis->setTicker(axis == CompareAxis::events
                                ? QSharedPointer<QCPAxisTicker>(new EventTicker)
                                : QSharedPointer<QCPAxisTicker>::create());
    const QColor color = colors::run(static_cast<int>(i));
    if (QCPGraph* reserved = plotRunCurves(small, run, color, axis, compareRunLabel(run))) {
      plotRunOoms(small, run, color, axis);
      bool found = false;
      const QCPRange keys = reserved->getKeyRange(found);
      small->xAxis->setRange(found ? keys : QCPRange(0, 1));
    }
    if (const auto limit = storage::run_memory_limit(run.record)) {
      auto* line = new QCPItemStraightLine(small);
      line->point1->setCoords(0, static_cast<double>(*limit));
      line->point2->setCoords(1, static_cast<double>(*limit));
      line->setPen(QPen(colors::oom, 1.2, Qt::DotLine));
    }
    small->yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);  // shared scale: sizes compare by eye
    small->setMinimumHeight(130);
    m_multiplesLayout->addWidget(small, static_cast<int>(i) / columns,
                                 static_cast<int>(i) % columns);
  }
}

void ComparePage::showPeakMaps() {
  const int columns = m_data.runs.size() <= 2 ? 2 : 3;
  for (std::size_t i = 0; i < m_data.runs.size(); ++i) {
    const ComparedRun& run = m_data.runs[i];
    auto* cell = new QWidget(m_peakMapsBox);
    auto* cellLayout = new QVBoxLayout(cell);
    cellLayout->setContentsMargins(2, 2, 2, 2);
    auto* title = new QLabel(cell);
    title->setTextFormat(Qt::RichText);
    title->setWordWrap(true);
    cellLayout->addWidget(title);
    SegmentMapWidget* map = nullptr;
    if (run.atPeak) {
      const SegmentMapSummary& summary = run.atPeak->summary;
      title->setText(tr("<b style='color:%1'>%2</b><br>after event %3: %4 reserved in %5 "
                        "segments, %6 live, largest free %7")
                         .arg(colors::run(static_cast<int>(i)).name(),
                              compareRunLabel(run).toHtmlEscaped(),
                              formatCount(run.atPeak->eventIndex),
                              formatBytes(static_cast<double>(summary.reserved)))
                         .arg(summary.segments + summary.expandableRanges)
                         .arg(formatBytes(static_cast<double>(summary.live)),
                              formatBytes(static_cast<double>(summary.largestFree))));
      map = new SegmentMapWidget(cell);
      map->setMinimumSize(320, 180);
      map->setSnapshot(*run.atPeak);
      cellLayout->addWidget(map, 1);
    } else {
      title->setText(tr("<b>%1</b><br><i>The segment layout could not be rebuilt from this run's "
                        "events (a truncated trace).</i>")
                         .arg(compareRunLabel(run).toHtmlEscaped()));
    }
    m_peakMaps.push_back(map);
    m_peakLayout->addWidget(cell, static_cast<int>(i) / columns, static_cast<int>(i) % columns);
  }
}

void ComparePage::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    applyPlotPalette(m_overlay, palette());
    for (auto* plot : m_multiples->findChildren<QCustomPlot*>())
      applyPlotPalette(plot, palette());
  }
  QWidget::changeEvent(event);
}

}  // namespace fragscope::gui
