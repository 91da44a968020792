#include "gui/post_mortem_page.h"

#include <QHeaderView>
#include <QPushButton>
#include <QVBoxLayout>
#include <algorithm>

#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/run.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/error.h"
#include "gui/format.h"
#include "gui/run_data.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

namespace {
struct RunRequests {
  storage::RunRecord record;
  alloc::AllocatorConfig config;
  analysis::TraceRequests requests;
  std::vector<TraceEvent> events;
  snapshot::SegmentState initial;
};

RunRequests loadRequests(const QString& databasePath, storage::RunId run) {
  auto store = openReader(databasePath);
  // The recorded config and the state at the first event, laid out with that config's rules
  // (one loader below storage, shared with the summary's memory_stats_at).
  storage::RunTrace trace = storage::load_run_trace(*store, run);
  RunRequests loaded;
  loaded.record = std::move(trace.record);
  loaded.config = std::move(trace.config);
  loaded.events = std::move(trace.events);
  loaded.initial = std::move(trace.initial);
  loaded.requests = analysis::requests_from_trace(loaded.events, loaded.initial);
  return loaded;
}

analysis::WhatIfOptions whatIfOptions(const RunRequests& loaded, std::optional<Bytes> limit) {
  analysis::WhatIfOptions options;
  options.capacity = limit;
  options.threads = 0;
  options.recorded_segments = loaded.requests.recorded_segments;
  return options;
}
}  // namespace

PostMortemData loadPostMortem(const QString& databasePath, storage::RunId run, bool alwaysWhatIf,
                              const JobContext* job) {
  PostMortemData data;
  RunRequests loaded = loadRequests(databasePath, run);
  data.record = loaded.record;
  data.limit = storage::run_memory_limit(loaded.record);
  data.postMortems =
      analysis::trace_post_mortems(loaded.events, loaded.initial, loaded.config, data.limit);
  if (job && job->cancelled())
    return data;
  if (job)
    job->progress(0.3);
  if (data.postMortems.empty() && !alwaysWhatIf)
    return data;
  try {
    const auto candidates = analysis::standard_mitigations(loaded.requests.requests, loaded.config);
    data.whatIf = analysis::run_what_if(loaded.requests.requests, candidates,
                                        whatIfOptions(loaded, data.limit));
  } catch (const std::exception& error) {
    data.whatIfError = QString::fromUtf8(error.what());
  }
  return data;
}

storage::RunId runMitigation(const QString& databasePath, storage::RunId run,
                             const std::string& mitigation, const JobContext* job) {
  RunRequests loaded = loadRequests(databasePath, run);
  const auto candidates = analysis::standard_mitigations(loaded.requests.requests, loaded.config);
  const auto chosen =
      std::find_if(candidates.begin(), candidates.end(),
                   [&](const analysis::Mitigation& m) { return m.name == mitigation; });
  if (chosen == candidates.end())
    throw InputError("run " + std::to_string(run.value) + ": no mitigation named \"" + mitigation +
                     "\"");
  if (job && job->cancelled())
    throw InputError("cancelled");
  const std::optional<Bytes> limit = storage::run_memory_limit(loaded.record);
  // The same device the what-if row ran on, so the stored replay is the row's run exactly: the
  // whole simulated device, the recording's segment addresses to break best-fit ties.
  const Bytes deviceMemory = std::max(analysis::kDefaultDeviceMemory, limit.value_or(0));
  alloc::SimulatedDevice simulated(deviceMemory, deviceMemory);
  alloc::RecordedAddressDevice device(loaded.requests.recorded_segments, simulated);
  alloc::TraceRecorder recorder;
  alloc::RunOptions options;
  options.allowed_memory = limit;
  const RequestStream& requests = chosen->requests ? *chosen->requests : loaded.requests.requests;
  const alloc::RunResult result =
      alloc::run_requests(requests, chosen->config, device, &recorder, options);

  storage::RunStore store(databasePath.toStdString());
  storage::RunRecord record;
  record.name = loaded.record.name + " · " + chosen->name;
  record.source = storage::RunSource::simulated;
  record.alloc_config = chosen->alloc_conf;
  record.capacity = limit.value_or(0);
  record.device_name = loaded.record.device_name;
  record.environment = storage::Environment::current();
  record.environment.gpu_name = loaded.record.environment.gpu_name;
  const storage::RunId created = store.begin_run(record);
  store.append_events(created, recorder.events());
  nlohmann::json summary;
  summary["mitigation_of"] = run.value;
  summary["mitigation"] = chosen->name;
  store.finish_run(created, result.ooms.empty() ? storage::RunStatus::ok : storage::RunStatus::oom,
                   summary);
  return created;
}

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
  if (role == Qt::DisplayRole || role == SortRole) {
    const bool sort = role == SortRole;
    switch (index.column()) {
      case RankColumn:
        return static_cast<qulonglong>(row.rank);
      case NameColumn:
        return QString(
            QString::fromStdString(row.name) +
            (row.alloc_conf.empty() || sort
                 ? QString()
                 : QStringLiteral("  (%1)").arg(QString::fromStdString(row.alloc_conf))));
      case OutcomeColumn:
        if (!row.error.empty())
          return tr("error: %1").arg(QString::fromStdString(row.error));
        return row.ok ? tr("avoids the OOM") : tr("OOM");
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

void WhatIfModel::resetData(const analysis::WhatIfTable& table) {
  beginResetModel();
  m_table = table;
  endResetModel();
}

void WhatIfModel::clearData() {
  resetData({});
}

PostMortemPage::PostMortemPage(QWidget* parent)
    : QWidget(parent),
      m_header(new QLabel(this)),
      m_evidence(new QLabel(this)),
      m_model(new WhatIfModel(this)),
      m_table(new QTableView(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  m_header->setTextFormat(Qt::RichText);
  m_header->setWordWrap(true);
  m_evidence->setTextFormat(Qt::RichText);
  m_evidence->setWordWrap(true);
  m_evidence->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_header);
  layout->addWidget(m_evidence);
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
  m_header->setText(tr("<i>Select a run that ran out of memory.</i>"));
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
        m_header->setText(tr("<b>Could not analyse the run:</b> %1").arg(message.toHtmlEscaped()));
        emit errorOccurred(message);
      });
}

void PostMortemPage::showData(PostMortemData data) {
  m_data = std::move(data);
  const QString name = QString::fromStdString(m_data->record.name).toHtmlEscaped();
  if (m_data->postMortems.empty()) {
    m_header->setText(tr("<b>%1</b> did not run out of memory.").arg(name));
    emit dataReady();
    return;
  }
  const analysis::OomPostMortem& first = m_data->postMortems.front();
  m_header->setText(
      tr("<b>%1</b>: %2 OOM(s). The first, at event %3, is <b style='color:%4'>%5</b>: a request "
         "of %6 (rounded %7) with %8 allocated and %9 reserved%10.")
          .arg(name)
          .arg(m_data->postMortems.size())
          .arg(
              formatCount(first.event_index), colors::oom.name(),
              QString::fromLatin1(analysis::to_string(first.cause)),
              formatBytes(static_cast<double>(first.requested)),
              formatBytes(static_cast<double>(first.rounded)),
              formatBytes(static_cast<double>(first.allocated)),
              formatBytes(static_cast<double>(first.reserved)),
              m_data->limit
                  ? tr(" under a limit of %1").arg(formatBytes(static_cast<double>(*m_data->limit)))
                  : QString()));
  QString evidence = QStringLiteral("<ul>");
  for (const std::string& sentence : first.evidence)
    evidence += QStringLiteral("<li>%1</li>").arg(QString::fromStdString(sentence).toHtmlEscaped());
  evidence += QStringLiteral("<li>%1</li></ul>")
                  .arg(tr("PyTorch's figures: %1")
                           .arg(QString::fromStdString(first.pytorch_figures()).toHtmlEscaped()));
  if (m_data->whatIf)
    evidence += tr("<p>What-if: the same requests under the standard mitigations, best first. "
                   "Perfect packing would need %1.</p>")
                    .arg(formatBytes(static_cast<double>(m_data->whatIf->ideal_peak)));
  else if (!m_data->whatIfError.isEmpty())
    evidence +=
        tr("<p><b>The what-if replay failed:</b> %1</p>").arg(m_data->whatIfError.toHtmlEscaped());
  m_evidence->setText(evidence);
  if (m_data->whatIf) {
    m_model->resetData(*m_data->whatIf);
    for (int row = 0; row < m_model->rowCount(); ++row) {
      auto* button = new QPushButton(tr("Run"), m_table);
      button->setToolTip(tr("Replay with %1 and store it as a new run")
                             .arg(QString::fromStdString(m_model->rowAt(row)->name)));
      connect(button, &QPushButton::clicked, this, [this, row] { runRow(row); });
      m_table->setIndexWidget(m_model->index(row, WhatIfModel::ActionColumn), button);
    }
  }
  emit dataReady();
}

void PostMortemPage::runRow(int row) {
  const analysis::WhatIfRow* chosen = m_model->rowAt(row);
  if (!chosen || !m_run)
    return;
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
