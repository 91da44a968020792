#include "gui/runs_model.h"

#include <QDateTime>
#include <map>

#include "gui/format.h"

namespace fragscope::gui {

std::int64_t summaryPeak(const storage::RunRecord& run, const char* series) {
  const auto peaks = run.summary.find("peaks");
  if (peaks == run.summary.end() || !peaks->is_object())
    return 0;
  const auto value = peaks->find(series);
  return value != peaks->end() && value->is_number_integer() ? value->get<std::int64_t>() : 0;
}

bool runStartsMidRun(const storage::RunRecord& run) {
  const auto truncated = run.summary.find("truncated");
  return truncated != run.summary.end() && truncated->is_boolean() && truncated->get<bool>();
}

QStringList runImportWarnings(const storage::RunRecord& run) {
  QStringList warnings;
  const auto stored = run.summary.find("warnings");
  if (stored == run.summary.end() || !stored->is_array())
    return warnings;
  for (const nlohmann::json& warning : *stored)
    if (warning.is_string())
      warnings << QString::fromStdString(warning.get<std::string>());
  return warnings;
}

QString outcomeText(const storage::RunRecord& run) {
  QString text = QString::fromLatin1(to_string(run.status));
  if (runStartsMidRun(run))
    text += QObject::tr(" · mid-run");
  return text;
}

RunsModel::RunsModel(QObject* parent) : QAbstractTableModel(parent) {}

int RunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int RunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const storage::RunRecord& run = m_runs[static_cast<std::size_t>(index.row())];
  const auto text = [](const std::string& s) { return QString::fromStdString(s); };
  const storage::ExperimentProgress* incomplete = incompleteExperiment(run);
  if (role == RunIdRole)
    return QVariant::fromValue(run.id);
  if (role == StatusRole)
    return text(std::string(to_string(run.status)));
  if (role == FilterTextRole)
    return QStringList{text(run.name),
                       text(std::string(to_string(run.source))),
                       text(std::string(to_string(run.status))),
                       text(run.alloc_conf),
                       text(run.device_name),
                       incomplete ? QStringLiteral("incomplete") : QString()}
        .join(QLatin1Char(' '));
  if (role == Qt::DisplayRole || role == Qt::EditRole || role == SortRole) {
    const bool sort = role == SortRole;
    switch (index.column()) {
      case NameColumn:
        if (role == Qt::DisplayRole && m_sharedName[static_cast<std::size_t>(index.row())])
          return QStringLiteral("%1 · #%2").arg(text(run.name)).arg(run.id.value);
        return text(run.name);
      case SourceColumn:
        return text(std::string(to_string(run.source)));
      case StatusColumn:
        if (sort)
          return text(std::string(to_string(run.status)));
        if (incomplete)
          return tr("%1 · experiment incomplete (%2 of %3)")
              .arg(outcomeText(run))
              .arg(incomplete->stored_points)
              .arg(incomplete->expected_points);
        return outcomeText(run);
      case ConfigColumn:
        return run.alloc_conf.empty() && !sort ? QStringLiteral("(default)") : text(run.alloc_conf);
      case DeviceColumn:
        return text(run.device_name);
      case EventsColumn:
        return sort ? QVariant(static_cast<qulonglong>(run.event_count))
                    : QVariant(formatCount(run.event_count));
      case PeakAllocatedColumn: {
        const auto peak = summaryPeak(run, "allocated");
        return sort ? QVariant(static_cast<qlonglong>(peak))
                    : QVariant(formatBytes(static_cast<double>(peak)));
      }
      case PeakReservedColumn: {
        const auto peak = summaryPeak(run, "reserved");
        return sort ? QVariant(static_cast<qlonglong>(peak))
                    : QVariant(formatBytes(static_cast<double>(peak)));
      }
      case CreatedColumn:
        return text(run.created_at);
      default:
        return {};
    }
  }
  if (role == Qt::TextAlignmentRole) {
    const int column = index.column();
    if (column == EventsColumn || column == PeakAllocatedColumn || column == PeakReservedColumn)
      return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  }
  if (role == Qt::ForegroundRole && index.column() == StatusColumn) {
    if (run.status == storage::RunStatus::oom || run.status == storage::RunStatus::failed ||
        incomplete)
      return colors::oom;
    return {};
  }
  if (role == Qt::ToolTipRole) {
    QString tip =
        tr("Run %1 · %2\noutcome: %3\nconfig: %4\ndevice: %5 · capacity %6")
            .arg(run.id.value)
            .arg(text(run.name), text(std::string(to_string(run.status))),
                 run.alloc_conf.empty() ? tr("(default)") : text(run.alloc_conf),
                 run.device_name.empty() ? tr("unknown") : text(run.device_name),
                 run.capacity ? formatBytes(static_cast<double>(run.capacity)) : tr("unknown"));
    if (runStartsMidRun(run))
      tip +=
          tr("\nThe trace starts mid-run: memory allocated before its first event is not in "
             "its figures.");
    for (const QString& warning : runImportWarnings(run))
      tip += tr("\nImport warning: %1").arg(warning);
    if (incomplete)
      tip += tr("\nIts experiment is incomplete: %1 of its %2 runs were stored (it was "
                "cancelled, killed or ran out of disk before the last).")
                 .arg(incomplete->stored_points)
                 .arg(incomplete->expected_points);
    return tip;
  }
  return {};
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 ||
      section >= ColumnCount)
    return {};
  switch (section) {
    case NameColumn:
      return tr("Name");
    case SourceColumn:
      return tr("Source");
    case StatusColumn:
      return tr("Outcome");
    case ConfigColumn:
      return tr("Allocator config");
    case DeviceColumn:
      return tr("Device");
    case EventsColumn:
      return tr("Events");
    // Two lines, so that both peaks and their names fit the dock's default width.
    case PeakAllocatedColumn:
      return tr("Peak\nallocated");
    case PeakReservedColumn:
      return tr("Peak\nreserved");
    case CreatedColumn:
      return tr("Created");
    default:
      return {};
  }
}

Qt::ItemFlags RunsModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags flags = QAbstractTableModel::flags(index);
  if (index.isValid() && index.column() == NameColumn)
    flags |= Qt::ItemIsEditable;
  return flags;
}

bool RunsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !checkIndex(index, CheckIndexOption::IndexIsValid) ||
      index.column() != NameColumn)
    return false;
  const QString name = value.toString().trimmed();
  if (name.isEmpty())
    return false;
  emit renameRequested(m_runs[static_cast<std::size_t>(index.row())].id, name);
  return true;
}

void RunsModel::resetData(
    std::vector<storage::RunRecord> runs,
    std::map<storage::ExperimentId, storage::ExperimentProgress> experiments) {
  beginResetModel();
  m_runs = std::move(runs);
  m_experiments = std::move(experiments);
  updateDuplicateNames();
  endResetModel();
}

void RunsModel::clearData() {
  resetData({});
}

void RunsModel::updateName(storage::RunId run, const QString& name) {
  const int row = rowOf(run);
  if (row < 0)
    return;
  m_runs[static_cast<std::size_t>(row)].name = name.toStdString();
  updateDuplicateNames();
  emit dataChanged(index(0, NameColumn), index(rowCount() - 1, NameColumn));
}

void RunsModel::updateDuplicateNames() {
  std::map<std::string, int> uses;
  for (const storage::RunRecord& run : m_runs)
    ++uses[run.name];
  m_sharedName.assign(m_runs.size(), false);
  for (std::size_t i = 0; i < m_runs.size(); ++i)
    m_sharedName[i] = uses[m_runs[i].name] > 1;
}

const storage::ExperimentProgress* RunsModel::incompleteExperiment(
    const storage::RunRecord& run) const {
  if (!run.experiment)
    return nullptr;
  const auto it = m_experiments.find(*run.experiment);
  return it != m_experiments.end() && !it->second.complete ? &it->second : nullptr;
}

const storage::RunRecord* RunsModel::runAt(int row) const {
  if (row < 0 || row >= rowCount())
    return nullptr;
  return &m_runs[static_cast<std::size_t>(row)];
}

int RunsModel::rowOf(storage::RunId run) const {
  for (std::size_t i = 0; i < m_runs.size(); ++i)
    if (m_runs[i].id == run)
      return static_cast<int>(i);
  return -1;
}

RunsFilterModel::RunsFilterModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunsModel::SortRole);
  setSortCaseSensitivity(Qt::CaseInsensitive);
}

void RunsFilterModel::setFilterWords(const QString& text) {
  m_words = text.split(QLatin1Char(' '), Qt::SkipEmptyParts);
  invalidateFilter();
}

void RunsFilterModel::setStatusFilter(const QString& status) {
  m_status = status;
  invalidateFilter();
}

bool RunsFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  const QModelIndex index = sourceModel()->index(sourceRow, 0, sourceParent);
  if (!m_status.isEmpty()) {
    const QString status = sourceModel()
                               ->index(sourceRow, RunsModel::StatusColumn, sourceParent)
                               .data(RunsModel::StatusRole)
                               .toString();
    if (status != m_status)
      return false;
  }
  const QString haystack = index.data(RunsModel::FilterTextRole).toString();
  for (const QString& word : m_words)
    if (!haystack.contains(word, Qt::CaseInsensitive))
      return false;
  return true;
}

}  // namespace fragscope::gui
