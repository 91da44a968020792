#include "gui/job_page.h"

#include <qcustomplot.h>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QPainter>
#include <QSplitter>
#include <QVBoxLayout>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "gui/format.h"
#include "gui/plot_style.h"

namespace fragscope::gui {
namespace {

std::unique_ptr<storage::RunStore> openStore(const QString& path) {
  return storage::open_run_store(path.toStdString(), storage::OpenMode::read_only, true);
}

// A plot that reports a click, so a rank's small multiple opens it like its table row.
class RankPlot : public QCustomPlot {
 public:
  RankPlot(QWidget* parent, std::function<void()> onActivate)
      : QCustomPlot(parent), m_onActivate(std::move(onActivate)) {}

 protected:
  void mouseDoubleClickEvent(QMouseEvent* event) override {
    QCustomPlot::mouseDoubleClickEvent(event);
    m_onActivate();
  }

 private:
  std::function<void()> m_onActivate;
};

}  // namespace

std::vector<storage::JobRecord> listJobs(const QString& databasePath) {
  return storage::list_jobs(*openStore(databasePath));
}

JobViewData loadJobView(const QString& databasePath, storage::JobId job, std::size_t buckets,
                        const JobContext* context) {
  auto store = openStore(databasePath);
  JobViewData data;
  data.job = storage::job(*store, job);
  data.balance = storage::job_balance(*store, data.job);
  for (std::size_t i = 0; i < data.job.ranks.size(); ++i) {
    if (context && context->cancelled())
      return data;
    JobRankView view;
    view.rank = data.job.ranks[i].rank;
    view.record = store->run(data.job.ranks[i].run);
    view.timeline = store->timeline(data.job.ranks[i].run, buckets);
    if (const auto ends = view.record.summary.find("step_ends_us");
        ends != view.record.summary.end() && ends->is_array())
      for (const nlohmann::json& end : *ends)
        if (end.is_number_unsigned())
          view.stepEndsUs.push_back(end.get<std::uint64_t>());
    data.ranks.push_back(std::move(view));
    if (context)
      context->progress(static_cast<double>(i + 1) / static_cast<double>(data.job.ranks.size()));
  }
  return data;
}

// ---- JobBalanceModel ------------------------------------------------------------------------

JobBalanceModel::JobBalanceModel(QObject* parent) : QAbstractTableModel(parent) {}

int JobBalanceModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_balance.ranks.size());
}

int JobBalanceModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

int JobBalanceModel::worstRow() const {
  if (!m_balance.worst_rank)
    return -1;
  for (std::size_t i = 0; i < m_balance.ranks.size(); ++i)
    if (m_balance.ranks[i].rank == *m_balance.worst_rank)
      return static_cast<int>(i);
  return -1;
}

QVariant JobBalanceModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount())
    return {};
  const analysis::RankMemory& r = m_balance.ranks[static_cast<std::size_t>(index.row())];
  const bool worst = index.row() == worstRow();
  switch (role) {
    case WorstRole:
      return worst;
    case RunIdRole:
      return QVariant::fromValue<qint64>(r.run_id);
    case Qt::FontRole:
      if (worst) {
        QFont font;
        font.setBold(true);
        return font;
      }
      return {};
    case Qt::BackgroundRole:
      return worst ? QVariant(QColor(255, 200, 120, 90)) : QVariant();
    case Qt::ToolTipRole:
      return worst
                 ? tr("The worst rank: %1")
                       .arg(r.oom ? tr("it ran out of memory") : tr("it reserved the most memory"))
                 : QVariant();
    case Qt::TextAlignmentRole:
      return index.column() == RankColumn || index.column() == OomColumn
                 ? QVariant(Qt::AlignCenter)
                 : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    case SortRole:
    case Qt::DisplayRole:
      break;
    default:
      return {};
  }
  const bool sort = role == SortRole;
  switch (index.column()) {
    case RankColumn:
      return sort ? QVariant(r.rank)
                  : QVariant(QString::number(r.rank) + (worst ? QStringLiteral(" ★") : QString()));
    case RunColumn:
      return sort ? QVariant::fromValue<qint64>(r.run_id) : QVariant(QString::number(r.run_id));
    case AllocatedColumn:
      return sort ? QVariant(static_cast<double>(r.peak_allocated))
                  : QVariant(formatBytes(static_cast<double>(r.peak_allocated)));
    case ReservedColumn:
      return sort ? QVariant(static_cast<double>(r.peak_reserved))
                  : QVariant(formatBytes(static_cast<double>(r.peak_reserved)));
    case FragmentationColumn:
      return sort ? QVariant(r.fragmentation())
                  : QVariant(QString::number(r.fragmentation() * 100.0, 'f', 1) +
                             QStringLiteral(" %"));
    case OomColumn:
      return sort ? QVariant(static_cast<qulonglong>(r.ooms))
                  : QVariant(r.oom ? (r.ooms > 1 ? tr("%1 OOMs").arg(r.ooms) : tr("OOM"))
                                   : QStringLiteral("–"));
    default:
      return {};
  }
}

QVariant JobBalanceModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return {};
  switch (section) {
    case RankColumn:
      return tr("Rank");
    case RunColumn:
      return tr("Run");
    case AllocatedColumn:
      return tr("Peak allocated");
    case ReservedColumn:
      return tr("Peak reserved");
    case FragmentationColumn:
      return tr("Fragmentation");
    case OomColumn:
      return tr("OOM");
    default:
      return {};
  }
}

void JobBalanceModel::resetData(const analysis::JobBalance& balance) {
  beginResetModel();
  m_balance = balance;
  endResetModel();
}

// ---- JobPage --------------------------------------------------------------------------------

JobPage::JobPage(QWidget* parent)
    : QWidget(parent),
      m_jobs(new QComboBox(this)),
      m_align(new QComboBox(this)),
      m_header(new QLabel(this)),
      m_multiples(new QWidget(this)),
      m_multiplesLayout(new QGridLayout(m_multiples)),
      m_model(new JobBalanceModel(this)),
      m_table(new QTableView(this)) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Job:"), this));
  bar->addWidget(m_jobs, 1);
  bar->addWidget(new QLabel(tr("Align ranks by:"), this));
  m_align->addItem(tr("Time since the rank's first event"));
  m_align->addItem(tr("Share of the rank's events"));
  m_align->addItem(tr("Training step (fragscope-record's step times)"));
  bar->addWidget(m_align);
  layout->addLayout(bar);
  m_header->setWordWrap(true);
  m_header->setTextFormat(Qt::RichText);
  layout->addWidget(m_header);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  m_multiplesLayout->setContentsMargins(0, 0, 0, 0);
  splitter->addWidget(m_multiples);
  m_table->setModel(m_model);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setToolTip(tr("Double-click a rank to open its timeline, segment map and post-mortem"));
  splitter->addWidget(m_table);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 1);
  layout->addWidget(splitter, 1);

  connect(m_jobs, &QComboBox::currentIndexChanged, this, [this](int index) {
    if (index >= 0)
      showJob(storage::JobId{m_jobs->itemData(index).toLongLong()});
  });
  connect(m_align, &QComboBox::currentIndexChanged, this, [this](int index) {
    m_alignment = index == 2 ? Alignment::step : index == 1 ? Alignment::share : Alignment::time;
    plotMultiples();
  });
  connect(m_table, &QTableView::activated, this, [this](const QModelIndex& index) {
    emit rankActivated(
        storage::RunId{m_model->data(index, JobBalanceModel::RunIdRole).toLongLong()});
  });
  clear();
}

void JobPage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  refreshJobs();
}

void JobPage::refreshJobs() {
  const qint64 shown = m_jobs->currentIndex() >= 0 ? m_jobs->currentData().toLongLong() : -1;
  std::vector<storage::JobRecord> jobs;
  try {
    if (!m_databasePath.isEmpty())
      jobs = listJobs(m_databasePath);
  } catch (const std::exception& error) {
    emit errorOccurred(QString::fromUtf8(error.what()));
  }
  {
    const QSignalBlocker blocker(m_jobs);
    m_jobs->clear();
    for (const storage::JobRecord& job : jobs)
      m_jobs->addItem(tr("%1 (%n rank(s))", nullptr, static_cast<int>(job.ranks.size()))
                          .arg(QString::fromStdString(job.name)),
                      QVariant::fromValue<qint64>(job.id.value));
  }
  if (jobs.empty()) {
    clear();
    m_header->setText(
        tr("<i>No multi-rank jobs in this database. Import one with File ▸ Open "
           "(several rank snapshots or a fragscope-job.json) or with "
           "<code>fragscope-cli import rank0.pickle rank1.pickle … --job "
           "NAME</code>.</i>"));
    return;
  }
  int index = m_jobs->findData(QVariant::fromValue<qint64>(shown));
  if (index < 0)
    index = m_jobs->count() - 1;  // the newest job
  m_jobs->setCurrentIndex(index);
  showJob(storage::JobId{m_jobs->itemData(index).toLongLong()});
}

void JobPage::showJob(storage::JobId job) {
  const QString path = m_databasePath;
  m_header->setText(tr("<i>Loading the job…</i>"));
  m_job.start(
      [path, job](const JobContext& context) { return loadJobView(path, job, 600, &context); },
      [this](JobViewData data) { showData(std::move(data)); },
      [this](const QString& message) {
        m_header->setText(tr("<b>Could not load the job:</b> %1").arg(message.toHtmlEscaped()));
        emit errorOccurred(message);
      });
}

void JobPage::setAlignment(Alignment alignment) {
  m_align->setCurrentIndex(alignment == Alignment::step    ? 2
                           : alignment == Alignment::share ? 1
                                                           : 0);
}

void JobPage::clear() {
  m_data = {};
  m_model->resetData({});
  while (QLayoutItem* item = m_multiplesLayout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  m_header->clear();
}

void JobPage::showData(JobViewData data) {
  m_data = std::move(data);
  m_model->resetData(m_data.balance);
  m_table->resizeColumnsToContents();
  const analysis::JobBalance& b = m_data.balance;
  QString text = tr("<b>%1</b>: %2 of world size %3 · reserved imbalance %4× · allocated "
                    "imbalance %5×")
                     .arg(QString::fromStdString(b.job).toHtmlEscaped())
                     .arg(b.ranks.size())
                     .arg(m_data.job.world_size)
                     .arg(b.reserved_imbalance, 0, 'f', 3)
                     .arg(b.allocated_imbalance, 0, 'f', 3);
  if (const int worst = m_model->worstRow(); worst >= 0) {
    const analysis::RankMemory& r = b.ranks[static_cast<std::size_t>(worst)];
    text += tr("<br>Worst rank: <b>%1</b> (%2, peak reserved %3). Double-click a rank to open "
               "its timeline, segment map and post-mortem.")
                .arg(r.rank)
                .arg(r.oom ? tr("ran out of memory") : tr("the highest reserved peak"))
                .arg(formatBytes(static_cast<double>(r.peak_reserved)));
  }
  m_header->setText(text);
  plotMultiples();
  emit dataReady();
}

void JobPage::plotMultiples() {
  while (QLayoutItem* item = m_multiplesLayout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  const JobPlotScale scale = jobPlotScale(m_data);
  const int columns =
      m_data.ranks.size() > 4 ? 4 : std::max<int>(1, static_cast<int>(m_data.ranks.size()));
  const int worst = m_model->worstRow();
  for (std::size_t i = 0; i < m_data.ranks.size(); ++i) {
    const JobRankView& rank = m_data.ranks[i];
    const storage::RunId run = rank.record.id;
    auto* plot = new RankPlot(m_multiples, [this, run] { emit rankActivated(run); });
    setUpMemoryPlot(plot);
    drawRankPlot(plot, rank, static_cast<int>(i), static_cast<int>(i) == worst, m_alignment, scale);
    plot->setMinimumHeight(140);
    plot->setToolTip(tr("Double-click to open rank %1's timeline").arg(rank.rank));
    m_multiplesLayout->addWidget(plot, static_cast<int>(i) / columns,
                                 static_cast<int>(i) % columns);
  }
}

double stepCoordinate(const std::vector<std::uint64_t>& stepEndsUs, double firstUs, double timeUs) {
  if (stepEndsUs.empty())
    return 0;
  // the first end after timeUs names the step it belongs to
  const auto after =
      std::upper_bound(stepEndsUs.begin(), stepEndsUs.end(), timeUs,
                       [](double t, std::uint64_t end) { return t < static_cast<double>(end); });
  const auto step = static_cast<std::size_t>(after - stepEndsUs.begin());
  const auto end_of = [&](std::size_t k) { return static_cast<double>(stepEndsUs[k]); };
  double start = 0, length = 0;
  if (step == 0) {
    start = std::min(firstUs, end_of(0));
    length = end_of(0) - start;
  } else if (step < stepEndsUs.size()) {
    start = end_of(step - 1);
    length = end_of(step) - start;
  } else {  // after the last recorded end: the last step's length goes on
    start = end_of(step - 1);
    length =
        step >= 2 ? end_of(step - 1) - end_of(step - 2) : end_of(0) - std::min(firstUs, end_of(0));
  }
  return static_cast<double>(step) + (length > 0 ? (timeUs - start) / length : 0.0);
}

JobPlotScale jobPlotScale(const JobViewData& data) {
  JobPlotScale scale;
  for (const JobRankView& rank : data.ranks) {
    for (const auto& bucket : rank.timeline)
      scale.top = std::max(scale.top, static_cast<double>(bucket.max.reserved));
    if (!rank.timeline.empty())
      scale.longest = std::max(
          scale.longest,
          static_cast<double>(rank.timeline.back().t1_us - rank.timeline.front().t0_us) / 1e6);
    scale.steps = std::max(scale.steps, static_cast<double>(rank.stepEndsUs.size()));
  }
  return scale;
}

void drawRankPlot(QCustomPlot* plot, const JobRankView& rank, int index, bool worst,
                  JobAlignment alignment, JobPlotScale scale) {
  plot->legend->setVisible(false);
  plot->plotLayout()->insertRow(0);
  const bool noSteps = alignment == JobAlignment::step && rank.stepEndsUs.empty();
  auto* title =
      new QCPTextElement(plot,
                         QObject::tr("rank %1%2%3")
                             .arg(rank.rank)
                             .arg(worst ? QObject::tr(" — worst") : QString())
                             .arg(noSteps ? QObject::tr(" — no step times recorded") : QString()),
                         QFont(plot->font().family(), -1, worst ? QFont::Bold : QFont::Normal));
  plot->plotLayout()->addElement(0, 0, title);
  QVector<double> keys, reserved, allocated;
  const double t0 = rank.timeline.empty() ? 0 : static_cast<double>(rank.timeline.front().t0_us);
  const double events = static_cast<double>(std::max<std::uint64_t>(rank.record.event_count, 1));
  const std::vector<storage::TimelineBucket> none;
  for (const auto& bucket : noSteps ? none : rank.timeline) {
    const auto start = static_cast<double>(bucket.t0_us);
    keys.push_back(alignment == JobAlignment::time ? (start - t0) / 1e6
                   : alignment == JobAlignment::share
                       ? 100.0 * static_cast<double>(bucket.first_event) / events
                       : stepCoordinate(rank.stepEndsUs, t0, start));
    reserved.push_back(static_cast<double>(bucket.max.reserved));
    allocated.push_back(static_cast<double>(bucket.max.allocated));
  }
  const QColor color = colors::run(index);
  QCPGraph* r = plot->addGraph();
  r->setName(QObject::tr("reserved"));
  r->setPen(QPen(color, 1.6));
  r->setLineStyle(QCPGraph::lsStepLeft);
  r->setData(keys, reserved, true);
  QCPGraph* a = plot->addGraph();
  a->setName(QObject::tr("allocated"));
  a->setPen(QPen(color, 1.2, Qt::DashLine));
  a->setLineStyle(QCPGraph::lsStepLeft);
  a->setData(keys, allocated, true);
  plot->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  plot->xAxis->setLabel(alignment == JobAlignment::time
                            ? QObject::tr("s since the rank's first event")
                        : alignment == JobAlignment::share ? QObject::tr("% of the rank's events")
                                                           : QObject::tr("training step"));
  plot->xAxis->setRange(0, alignment == JobAlignment::time    ? std::max(scale.longest, 1e-3)
                           : alignment == JobAlignment::share ? 100.0
                                                              : std::max(scale.steps, 1.0) + 0.5);
  plot->yAxis->setRange(0, scale.top > 0 ? scale.top * 1.08 : 1024);
}

QImage renderJobMultiples(const JobViewData& data, JobAlignment alignment, int width) {
  const int count = static_cast<int>(data.ranks.size());
  const int columns = std::clamp(count, 1, 4);
  const int rows = std::max(1, (count + columns - 1) / columns);
  const int cellWidth = width / columns;
  const int cellHeight = 260;
  QImage image(cellWidth * columns, cellHeight * rows, QImage::Format_ARGB32);
  image.fill(Qt::white);
  const JobPlotScale scale = jobPlotScale(data);
  const auto worst = data.balance.worst_rank;
  QPainter painter(&image);
  for (int i = 0; i < count; ++i) {
    const JobRankView& rank = data.ranks[static_cast<std::size_t>(i)];
    QCustomPlot plot;
    setUpMemoryPlot(&plot);
    drawRankPlot(&plot, rank, i, worst && *worst == rank.rank, alignment, scale);
    painter.drawPixmap((i % columns) * cellWidth, (i / columns) * cellHeight,
                       plot.toPixmap(cellWidth, cellHeight));
  }
  return image;
}

}  // namespace fragscope::gui
