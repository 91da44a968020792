#include "gui/compare_page.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QSignalBlocker>
#include <QSplitter>
#include <QVBoxLayout>
#include <cmath>
#include <limits>

#include "gui/format.h"
#include "gui/plot_style.h"
#include "gui/run_data.h"
#include "gui/runs_model.h"
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

// `keyScale` maps event indices onto the x axis (1, or 100 / events for "% of the run").
void plotRun(QCustomPlot* plot, const ComparedRun& run, const QColor& color, bool withAllocated,
             const QString& prefix, double keyScale = 1.0) {
  QVector<double> keys, reserved, allocated;
  for (const auto& bucket : run.timeline) {
    keys.push_back(static_cast<double>(bucket.first_event) * keyScale);
    reserved.push_back(static_cast<double>(bucket.max.reserved));
    allocated.push_back(static_cast<double>(bucket.max.allocated));
  }
  if (!run.timeline.empty()) {
    keys.push_back(static_cast<double>(run.timeline.back().end_event) * keyScale);
    reserved.push_back(reserved.back());
    allocated.push_back(allocated.back());
  }
  QCPGraph* reservedGraph = plot->addGraph();
  reservedGraph->setName(prefix + QObject::tr("reserved"));
  reservedGraph->setPen(QPen(color, 1.6));
  reservedGraph->setLineStyle(QCPGraph::lsStepLeft);
  reservedGraph->setData(keys, reserved, true);
  if (withAllocated) {
    QCPGraph* allocatedGraph = plot->addGraph();
    allocatedGraph->setName(prefix + QObject::tr("allocated"));
    allocatedGraph->setPen(QPen(color, 1.2, Qt::DashLine));
    allocatedGraph->setLineStyle(QCPGraph::lsStepLeft);
    allocatedGraph->setData(keys, allocated, true);
  }
}
// What the plots' axes must hold: the highest reserved peak and the run lengths.
struct Extent {
  double topReserved = 0;
  std::uint64_t longest = 1;
  std::uint64_t shortest = std::numeric_limits<std::uint64_t>::max();
};
Extent extentOf(const ComparisonData& data) {
  Extent extent;
  for (const ComparedRun& run : data.runs) {
    extent.topReserved =
        std::max(extent.topReserved, static_cast<double>(summaryPeak(run.record, "reserved")));
    extent.longest = std::max(extent.longest, run.record.event_count);
    extent.shortest = std::min(extent.shortest, run.record.event_count);
  }
  return extent;
}
}  // namespace

ComparisonData loadComparison(const QString& databasePath, const std::vector<storage::RunId>& runs,
                              std::size_t buckets, const JobContext* job) {
  ComparisonData data;
  const auto reader = openReader(databasePath);
  for (storage::RunId run : runs) {
    if (job && job->cancelled())
      break;
    ComparedRun compared;
    const RunOverview overview = loadOverview(databasePath, run, job);
    compared.record = overview.record;
    compared.oomCount = overview.oomEvents.size();
    compared.timeline =
        loadTimeline(databasePath, run, 0, overview.record.event_count, buckets).buckets;
    compared.profile = usecases::profile_of(*reader, overview.record);
    compared.recordedEnvironment = compared.profile->recorded_environment;
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
    check(QObject::tr("allocator config"), base.alloc_config, other.alloc_config);
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
      QString text =
          metric.isBytes ? formatBytes(value) : formatCount(static_cast<std::uint64_t>(value));
      if (different && metric.isBytes)
        text += QStringLiteral("  (%1)").arg(formatBytesDelta(value - baseline));
      else if (different)
        text += QStringLiteral("  (%1%2)")
                    .arg(value > baseline ? QStringLiteral("+") : QStringLiteral("\u2212"))
                    .arg(formatCount(static_cast<std::uint64_t>(std::fabs(value - baseline))));
      return text;
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

void ComparisonModel::resetData(const ComparisonData& data) {
  beginResetModel();
  m_runNames.clear();
  m_metrics.clear();
  if (!data.runs.empty()) {
    m_metrics = {{tr("Peak reserved"), true, {}},
                 {tr("Peak allocated"), true, {}},
                 {tr("Peak active"), true, {}},
                 {tr("Final reserved"), true, {}},
                 {tr("Reserved − allocated at peak reserved"), true, {}},
                 {tr("Events"), false, {}, false},
                 {tr("OOM events"), false, {}}};
    for (const ComparedRun& run : data.runs) {
      m_runNames.push_back(QString::fromStdString(run.record.name));
      double finalReserved = 0;
      const auto final = run.record.summary.find("final");
      if (final != run.record.summary.end() && final->contains("reserved"))
        finalReserved = final->at("reserved").get<double>();
      if (run.profile) {
        // The same measurement `fragscope-cli compare` prints.
        const analysis::MemorySample& peak = run.profile->metrics.peak;
        m_metrics[0].values.push_back(static_cast<double>(peak.reserved));
        m_metrics[1].values.push_back(static_cast<double>(peak.allocated));
        m_metrics[2].values.push_back(static_cast<double>(peak.active));
        const auto unused = usecases::reserved_unallocated_at_peak(*run.profile);
        m_metrics[4].values.push_back(unused ? static_cast<double>(*unused)
                                             : std::numeric_limits<double>::quiet_NaN());
      } else {
        m_metrics[0].values.push_back(static_cast<double>(summaryPeak(run.record, "reserved")));
        m_metrics[1].values.push_back(static_cast<double>(summaryPeak(run.record, "allocated")));
        m_metrics[2].values.push_back(static_cast<double>(summaryPeak(run.record, "active")));
        // Without the events there is no single event to read both counters at.
        m_metrics[4].values.push_back(std::numeric_limits<double>::quiet_NaN());
      }
      m_metrics[3].values.push_back(finalReserved);
      m_metrics[5].values.push_back(static_cast<double>(run.record.event_count));
      m_metrics[6].values.push_back(static_cast<double>(run.oomCount));
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
      m_overlayAxis(new QComboBox(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  m_header->setTextFormat(Qt::RichText);
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
  m_overlayAxis->addItem(tr("Overlay by event index"));
  m_overlayAxis->addItem(tr("Overlay by share of each run"));
  m_overlayAxis->setToolTip(
      tr("Runs of different lengths line up better by the share of their own events"));
  connect(m_overlayAxis, &QComboBox::currentIndexChanged, this, [this] { plotOverlay(); });
  auto* bar = new QHBoxLayout;
  bar->addStretch(1);
  bar->addWidget(m_overlayAxis);
  layout->addLayout(bar);
  setUpMemoryPlot(m_overlay);
  placeLegendBeside(m_overlay);  // four entries a run: over the data they would hide a short run
  m_overlay->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_overlay->axisRect()->setRangeDrag(Qt::Horizontal);
  m_overlay->axisRect()->setRangeZoom(Qt::Horizontal);
  m_overlay->setMinimumHeight(200);
  splitter->addWidget(m_overlay);
  m_multiplesLayout->setContentsMargins(0, 0, 0, 0);
  splitter->addWidget(m_multiples);
  m_table->setModel(m_model);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  m_table->setAlternatingRowColors(true);
  splitter->addWidget(m_table);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  splitter->setStretchFactor(2, 2);
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
  m_overlay->clearGraphs();
  m_overlay->replot(QCustomPlot::rpQueuedReplot);
  while (QLayoutItem* item = m_multiplesLayout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  m_warning->hide();
  m_story->clear();
  m_story->hide();
  m_header->setText(tr("<i>Select two or more runs in the Runs browser and press Compare.</i>"));
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
  QStringList names;
  for (const ComparedRun& run : m_data.runs)
    names << QString::fromStdString(run.record.name).toHtmlEscaped();
  m_header->setText(tr("<b>Comparing %1 runs:</b> %2")
                        .arg(m_data.runs.size())
                        .arg(names.join(QStringLiteral(", "))));
  const QStringList warnings = comparisonWarnings(m_data);
  m_warning->setVisible(!warnings.isEmpty());
  if (!warnings.isEmpty())
    m_warning->setText(tr("<b>These runs differ in more than the workload:</b><br>") +
                       warnings.join(QStringLiteral("<br>"))
                           .toHtmlEscaped()
                           .replace(QStringLiteral("&lt;br&gt;"), QStringLiteral("<br>")));

  const Extent extent = extentOf(m_data);
  const double top = extent.topReserved;
  // Runs of very different lengths (one that stops at its OOM beside one that trains to the
  // end) overlay by share of their own run; the user can switch back to event indices.
  {
    const QSignalBlocker blocker(m_overlayAxis);
    m_overlayAxis->setCurrentIndex(extent.shortest > 0 && extent.longest > 2 * extent.shortest ? 1
                                                                                               : 0);
  }
  plotOverlay();

  const int columns = m_data.runs.size() <= 2 ? 2 : 3;
  for (std::size_t i = 0; i < m_data.runs.size(); ++i) {
    auto* small = new QCustomPlot(m_multiples);
    setUpMemoryPlot(small);
    small->legend->setVisible(false);
    small->plotLayout()->insertRow(0);
    auto* title = new QCPTextElement(small, QString::fromStdString(m_data.runs[i].record.name));
    title->setTextColor(palette().color(QPalette::Text));
    small->plotLayout()->addElement(0, 0, title);
    small->xAxis->setLabel(QString());
    plotRun(small, m_data.runs[i], colors::run(static_cast<int>(i)), true, QString());
    small->xAxis->setRange(
        0, static_cast<double>(std::max<std::uint64_t>(m_data.runs[i].record.event_count, 1)));
    small->yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);  // shared scale: sizes compare by eye
    small->setMinimumHeight(130);
    m_multiplesLayout->addWidget(small, static_cast<int>(i) / columns,
                                 static_cast<int>(i) % columns);
  }
  emit dataReady();
}

bool ComparePage::overlayByShare() const {
  return m_overlayAxis->currentIndex() == 1;
}

void ComparePage::plotOverlay() {
  m_overlay->clearGraphs();
  const bool share = overlayByShare();
  const Extent extent = extentOf(m_data);
  const double top = extent.topReserved;
  for (std::size_t i = 0; i < m_data.runs.size(); ++i) {
    const auto events =
        static_cast<double>(std::max<std::uint64_t>(m_data.runs[i].record.event_count, 1));
    plotRun(m_overlay, m_data.runs[i], colors::run(static_cast<int>(i)), true,
            QString::fromStdString(m_data.runs[i].record.name) + QStringLiteral(" · "),
            share ? 100.0 / events : 1.0);
  }
  m_overlay->xAxis->setTicker(share ? QSharedPointer<QCPAxisTicker>::create()
                                    : QSharedPointer<QCPAxisTicker>(new EventTicker));
  m_overlay->xAxis->setLabel(share ? tr("% of each run's events") : tr("event"));
  m_overlay->xAxis->setRange(0, share ? 100.0 : static_cast<double>(extent.longest));
  m_overlay->yAxis->setRange(0, top > 0 ? top * 1.08 : 1024);
  m_overlay->replot(QCustomPlot::rpQueuedReplot);
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
