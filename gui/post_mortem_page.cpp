#include "gui/post_mortem_page.h"

#include <QHeaderView>
#include <QPushButton>
#include <QVBoxLayout>
#include <algorithm>
#include <limits>

#include "gui/format.h"

namespace fragscope::gui {

WhatIfModel::WhatIfModel(QObject* parent) : QAbstractTableModel(parent) {}

int WhatIfModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_table.rows.size());
}

int WhatIfModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

const analysis::WhatIfRow* WhatIfModel::rowAt(int row) const {
  if (row < 0 || row >= rowCount())
    return nullptr;
  return &m_table.rows[static_cast<std::size_t>(row)];
}

QVariant WhatIfModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const analysis::WhatIfRow& row = m_table.rows[static_cast<std::size_t>(index.row())];
  const analysis::WhatIfRow* baseline = m_table.baseline();
  const double delta = baseline ? static_cast<double>(row.peak_reserved) -
                                      static_cast<double>(baseline->peak_reserved)
                                : 0.0;
  if (role == NameRole)
    return QString::fromStdString(row.name);
  const bool failed = !row.ok || !row.error.empty();
  if (role == Qt::DisplayRole || role == SortRole) {
    const bool sort = role == SortRole;
    switch (index.column()) {
      case RankColumn:
        // Only a row that avoids the failure is ranked; one that OOMs later is not "better".
        if (failed)
          return sort ? QVariant(std::numeric_limits<qulonglong>::max()) : QVariant(tr("—"));
        return static_cast<qulonglong>(row.rank);
      case NameColumn: {
        QString name = QString::fromStdString(row.name);
        const QString conf = QString::fromStdString(row.alloc_conf);
        // The setting once: "max_split_size_mb:128", not "max_split_size_mb:128 (...:128)".
        if (!sort && !conf.isEmpty() && !name.contains(conf) &&
            !conf.startsWith(name + QLatin1Char(':')))
          name += QStringLiteral("  (%1)").arg(conf);
        if (!sort && &row == baseline)
          name += tr("  — the run as it was");
        return name;
      }
      case OutcomeColumn:
        // The error itself is the cell's tooltip: a long message must not widen the column.
        if (!row.error.empty())
          return tr("could not run");
        if (row.ok)
          return m_hadOom ? tr("avoids the OOM") : tr("fits");
        return tr("OOM");
      case PeakReservedColumn:
        return sort ? QVariant(static_cast<qulonglong>(row.peak_reserved))
                    : QVariant(formatBytes(static_cast<double>(row.peak_reserved)));
      case DeltaColumn:
        return sort ? QVariant(delta) : QVariant(formatBytesDelta(delta));
      case DeviceCallsColumn:
        return sort
                   ? QVariant(static_cast<qlonglong>(row.extra_device_calls))
                   : QVariant(QStringLiteral("%1%2")
                                  .arg(row.extra_device_calls > 0 ? QStringLiteral("+") : QString())
                                  .arg(row.extra_device_calls));
      case IdealColumn:
        // A row that failed never reached its peak: no ratio to show.
        if (failed)
          return sort ? QVariant(std::numeric_limits<double>::max()) : QVariant(QString());
        return sort ? QVariant(row.distance_from_ideal())
                    : QVariant(QStringLiteral("%1×").arg(row.distance_from_ideal(), 0, 'f', 2));
      case ActionColumn:
        return QString();
      default:
        return {};
    }
  }
  if (role == Qt::ForegroundRole && index.column() == OutcomeColumn)
    return row.ok ? QVariant(colors::active) : QVariant(colors::oom);
  if (role == Qt::TextAlignmentRole && index.column() >= PeakReservedColumn)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && index.column() == RankColumn && failed)
    return tr("Still runs out of memory: not ranked.");
  if (role == Qt::ToolTipRole && !row.error.empty())
    return QString::fromStdString(row.error);
  if (role == Qt::ToolTipRole && !row.oom_message.empty())
    return QString::fromStdString(row.oom_message);
  return {};
}

QVariant WhatIfModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return {};
  switch (section) {
    case RankColumn:
      return tr("Rank");
    case NameColumn:
      return tr("Mitigation");
    case OutcomeColumn:
      return tr("Outcome");
    case PeakReservedColumn:
      return tr("Peak reserved");
    case DeltaColumn:
      return tr("vs. baseline");
    case DeviceCallsColumn:
      return tr("Extra device calls");
    case IdealColumn:
      return tr("Peak / ideal");
    case ActionColumn:
      return tr("Try it");
    default:
      return {};
  }
}

void WhatIfModel::resetData(const analysis::WhatIfTable& table, bool hadOom) {
  beginResetModel();
  m_table = table;
  m_hadOom = hadOom;
  endResetModel();
}

void WhatIfModel::clearData() {
  resetData({});
}

PostMortemPage::PostMortemPage(QWidget* parent)
    : QWidget(parent),
      m_header(new QLabel(this)),
      m_evidence(new QLabel(this)),
      m_verdict(new QLabel(this)),
      m_model(new WhatIfModel(this)),
      m_table(new QTableView(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  m_header->setTextFormat(Qt::RichText);
  m_header->setWordWrap(true);
  m_evidence->setTextFormat(Qt::RichText);
  m_evidence->setWordWrap(true);
  m_evidence->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_verdict->setObjectName(QStringLiteral("verdict"));
  m_verdict->setTextFormat(Qt::RichText);
  m_verdict->setWordWrap(true);
  m_verdict->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_header);
  layout->addWidget(m_evidence);
  layout->addWidget(m_verdict);
  m_table->setModel(m_model);
  m_table->setAlternatingRowColors(true);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setSectionResizeMode(WhatIfModel::NameColumn, QHeaderView::Stretch);
  layout->addWidget(m_table, 1);
  clear();
}

void PostMortemPage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  clear();
}

void PostMortemPage::clear() {
  m_job.cancel();
  m_run.reset();
  m_data.reset();
  m_model->clearData();
  m_evidence->clear();
  m_verdict->clear();
  m_header->setText(
      tr("<i>Select a run in the Runs browser: a run that ran out of memory gets its diagnosis "
         "and what would have avoided it; any other run its fragmentation and the settings that "
         "lower its peak.</i>"));
}

void PostMortemPage::setRun(storage::RunId run) {
  clear();
  m_run = run;
  m_header->setText(tr("<i>Diagnosing run %1 and replaying the mitigations…</i>").arg(run.value));
  const QString path = m_databasePath;
  m_job.start(
      [path, run](const JobContext& job) { return loadPostMortem(path, run, false, &job); },
      [this](PostMortemData data) { showData(std::move(data)); },
      [this](const QString& message) {
        if (m_startsMidRun)
          m_header->setText(
              tr("<b>No post-mortem for this trace.</b> It began mid-run: what was allocated "
                 "before its first event is not in it, and the post-mortem replays the run "
                 "through the allocator model from a start state this trace does not give "
                 "exactly (%1). The Timeline, the segment map, Active Memory, Segments over "
                 "Time and the State History show what was recorded.")
                  .arg(message.toHtmlEscaped()));
        else
          m_header->setText(
              tr("<b>Could not analyse the run:</b> %1").arg(message.toHtmlEscaped()));
        emit analysisUnavailable(message);
      });
}

void PostMortemPage::showData(PostMortemData data) {
  m_data = std::move(data);
  if (m_data->postMortems.empty())
    showNoOom();
  else
    showOom();
  m_verdict->setText(verdictHtml());
  if (m_data->whatIf) {
    m_model->resetData(*m_data->whatIf, !m_data->postMortems.empty());
    for (int row = 0; row < m_model->rowCount(); ++row) {
      const analysis::WhatIfRow* what = m_model->rowAt(row);
      if (what == m_data->whatIf->baseline())
        continue;
      const bool workloadChange = m_data->workloadChanges.count(what->name) > 0;
      auto* button = new QPushButton(workloadChange ? tr("Open in Designer") : tr("Run"), m_table);
      button->setToolTip(workloadChange ? tr("Open the workload with %1 in the Experiment Designer")
                                              .arg(QString::fromStdString(what->name))
                                        : tr("Replay with %1 and store it as a new run")
                                              .arg(QString::fromStdString(what->name)));
      connect(button, &QPushButton::clicked, this, [this, row] { runRow(row); });
      m_table->setIndexWidget(m_model->index(row, WhatIfModel::ActionColumn), button);
    }
  }
  emit dataReady();
}

void PostMortemPage::showOom() {
  const QString name = QString::fromStdString(m_data->record.name).toHtmlEscaped();
  const analysis::OomPostMortem& first = m_data->postMortems.front();
  const QString capacity =
      first.limited || m_data->limit
          ? tr("%1 allowed (per-process limit)")
                .arg(formatBytes(static_cast<double>(m_data->limit.value_or(first.capacity))))
          : tr("%1 the allocator could hold").arg(formatBytes(static_cast<double>(first.capacity)));
  m_header->setText(
      tr("<b>%1</b>: %n OOM(s). The first, at event %2, is <b style='color:%3'>%4</b>: %5, with "
         "%6 allocated and %7 reserved of %8.",
         nullptr, static_cast<int>(m_data->postMortems.size()))
          .arg(name, formatCount(first.event_index), colors::oom.name(),
               QString::fromLatin1(analysis::to_string(first.cause)),
               describeFailingRequest(first).toHtmlEscaped(),
               formatBytes(static_cast<double>(first.allocated)),
               formatBytes(static_cast<double>(first.reserved)), capacity));
  QString evidence = QStringLiteral("<ul>");
  if (const Bytes shortBy = m_data->shortfall(); shortBy > 0)
    evidence += tr("<li><b>%1 short</b>: %2 allocated + %3 requested is more than %4. Even "
                   "perfect packing of the live tensors leaves no room.</li>")
                    .arg(formatBytes(static_cast<double>(shortBy)),
                         formatBytes(static_cast<double>(first.allocated)),
                         formatBytes(static_cast<double>(first.rounded)),
                         formatBytes(static_cast<double>(first.capacity)));
  if (m_data->categoriesAtOom) {
    std::vector<std::pair<std::int64_t, Category>> held;
    for (std::size_t i = 0; i < storage::kCategoryCount; ++i)
      if ((*m_data->categoriesAtOom)[i] > 0)
        held.emplace_back((*m_data->categoriesAtOom)[i], static_cast<Category>(i));
    std::sort(held.rbegin(), held.rend());
    QStringList parts;
    for (const auto& [bytes, category] : held)
      parts << QStringLiteral("<span style='color:%1'>■</span> %2 %3")
                   .arg(colors::category(category).name(), QString::fromUtf8(to_string(category)),
                        formatBytes(static_cast<double>(bytes)));
    if (!parts.isEmpty())
      evidence += tr("<li>Held at the failure: %1.</li>").arg(parts.join(QStringLiteral(", ")));
  }
  for (const std::string& sentence : first.evidence)
    evidence += QStringLiteral("<li>%1</li>").arg(QString::fromStdString(sentence).toHtmlEscaped());
  evidence += QStringLiteral("<li>%1</li></ul>")
                  .arg(tr("PyTorch's figures: %1")
                           .arg(QString::fromStdString(first.pytorch_figures()).toHtmlEscaped()));
  m_evidence->setText(evidence + replayNotes());
}

void PostMortemPage::showNoOom() {
  const QString name = QString::fromStdString(m_data->record.name).toHtmlEscaped();
  m_header->setText(tr("<b>%1</b> did not run out of memory.").arg(name));
  if (!m_data->metrics) {
    m_evidence->setText((m_data->metricsError.isEmpty()
                             ? QString()
                             : tr("<p>Its fragmentation cannot be measured: %1</p>")
                                   .arg(m_data->metricsError.toHtmlEscaped())) +
                        replayNotes());
    return;
  }
  const analysis::RunMetrics& metrics = *m_data->metrics;
  const analysis::MemorySample& atPeak = metrics.at_peak_reserved;
  const double unusedShare = atPeak.reserved > 0
                                 ? 100.0 * static_cast<double>(atPeak.cached_unused()) /
                                       static_cast<double>(atPeak.reserved)
                                 : 0.0;
  QString evidence = QStringLiteral("<ul>");
  evidence += tr("<li>At its peak reserved (%1, after event %2): %3 allocated, <b>%4 reserved but "
                 "unallocated</b> (%5% of reserved), %6 of it free inside split segments; the "
                 "largest free block %7.</li>")
                  .arg(formatBytes(static_cast<double>(atPeak.reserved)),
                       formatCount(metrics.peak_reserved_event),
                       formatBytes(static_cast<double>(atPeak.allocated)),
                       formatBytes(static_cast<double>(atPeak.cached_unused())))
                  .arg(unusedShare, 0, 'f', 1)
                  .arg(formatBytes(static_cast<double>(atPeak.inactive_split)),
                       formatBytes(static_cast<double>(atPeak.largest_free)));
  // External fragmentation where it matters (at the peak), not at the end of a run that freed
  // everything and keeps a few scattered blocks cached.
  evidence += tr("<li>Perfect packing of the same allocations would need %1; the run reserved "
                 "%2× that. External fragmentation at the peak: %3% of the cached free bytes are "
                 "outside the largest free block.</li>")
                  .arg(formatBytes(static_cast<double>(metrics.ideal_lower_bound())))
                  .arg(metrics.ideal_lower_bound() > 0
                           ? static_cast<double>(metrics.peak.reserved) /
                                 static_cast<double>(metrics.ideal_lower_bound())
                           : 1.0,
                       0, 'f', 2)
                  .arg(atPeak.external_fragmentation() * 100, 0, 'f', 1);
  if (m_data->limit)
    evidence += tr("<li>It ran under a per-process limit of %1: %2 of headroom at its peak.</li>")
                    .arg(formatBytes(static_cast<double>(*m_data->limit)),
                         formatBytes(static_cast<double>(*m_data->limit) -
                                     static_cast<double>(metrics.peak.reserved)));
  evidence += QStringLiteral("</ul>");
  m_evidence->setText(evidence + replayNotes());
}

QString PostMortemPage::replayNotes() const {
  QString html = tr("<p><small>Replayed with %1.").arg(m_data->allocatorRules.toHtmlEscaped());
  for (const QString& note : m_data->notes)
    html += QLatin1Char(' ') + tr("Note: %1.").arg(note.toHtmlEscaped());
  return html + QStringLiteral("</small></p>");
}

QString PostMortemPage::verdictHtml() const {
  if (!m_data)
    return {};
  if (!m_data->whatIfError.isEmpty())
    return tr("<p><b>The what-if replay failed:</b> %1</p>")
        .arg(m_data->whatIfError.toHtmlEscaped());
  if (!m_data->whatIf)
    return {};
  const auto fits = m_data->rowsThatFit();
  const bool hadOom = !m_data->postMortems.empty();
  const QString ideal = formatBytes(static_cast<double>(m_data->whatIf->ideal_peak));
  if (!hadOom) {
    const analysis::WhatIfRow* baseline = m_data->whatIf->baseline();
    const analysis::WhatIfRow* best = fits.empty() ? nullptr : fits.front();
    // A saving under 1 % of the peak is noise, not advice.
    if (best && baseline && best->peak_reserved < baseline->peak_reserved &&
        (baseline->peak_reserved - best->peak_reserved) * 100 > baseline->peak_reserved)
      return tr("<p><b>What to do:</b> %1 lowers peak reserved by %2, from %3 to %4 (perfect "
                "packing: %5). The table replays the run under each setting, best first.</p>")
          .arg(QString::fromStdString(best->name).toHtmlEscaped(),
               formatBytes(static_cast<double>(baseline->peak_reserved - best->peak_reserved)),
               formatBytes(static_cast<double>(baseline->peak_reserved)),
               formatBytes(static_cast<double>(best->peak_reserved)), ideal);
    return tr("<p>No allocator setting lowers this run's peak reserved by more than 1% (perfect "
              "packing: %1). The table replays the run under each setting.</p>")
        .arg(ideal);
  }
  QStringList settings, changes;
  for (const analysis::WhatIfRow* row : fits) {
    const QString label = QStringLiteral("<b>%1</b> (peak reserved %2)")
                              .arg(QString::fromStdString(row->name).toHtmlEscaped(),
                                   formatBytes(static_cast<double>(row->peak_reserved)));
    (m_data->workloadChanges.count(row->name) ? changes : settings) << label;
  }
  QString html = QStringLiteral("<p><b>What to do:</b> ");
  if (settings.isEmpty())
    html += m_data->postMortems.front().cause == analysis::OomCause::capacity
                ? tr("no allocator setting avoids this OOM: it is a capacity OOM, so only using "
                     "less memory helps. ")
                : tr("no allocator setting avoids this OOM. ");
  else
    html += tr("these allocator settings avoid it: %1. ").arg(settings.join(QStringLiteral(", ")));
  if (!changes.isEmpty())
    html += tr("Workload changes that fit, computed by simulating them: %1 (Open in Designer to "
               "run them). ")
                .arg(changes.join(QStringLiteral(", ")));
  else if (m_data->record.source != storage::RunSource::simulated)
    html +=
        tr("For a recorded run, shrink what is live at the failure: a smaller micro-batch "
           "with gradient accumulation, activation checkpointing, or torch.compile. ");
  html += tr("Perfect packing of the same requests would need %1.</p>").arg(ideal);
  return html;
}

void PostMortemPage::runRow(int row) {
  const analysis::WhatIfRow* chosen = m_model->rowAt(row);
  if (!chosen || !m_run || !m_data)
    return;
  if (const auto change = m_data->workloadChanges.find(chosen->name);
      change != m_data->workloadChanges.end()) {
    emit workloadChangeRequested(QString::fromStdString(change->second.dump(2)));
    return;
  }
  const QString path = m_databasePath;
  const storage::RunId run = *m_run;
  const std::string name = chosen->name;
  m_header->setText(
      m_header->text() +
      tr("<br><i>Replaying with %1…</i>").arg(QString::fromStdString(name).toHtmlEscaped()));
  m_runJob.start(
      [path, run, name](const JobContext& job) { return runMitigation(path, run, name, &job); },
      [this, run](storage::RunId created) { emit mitigationStored(run, created); },
      [this](const QString& message) { emit errorOccurred(message); });
}

}  // namespace fragscope::gui
