#include "gui/compare_views.h"

#include <QColor>
#include <QStringList>
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/allocator/config.h"
#include "gui/format.h"
#include "gui/job_page.h"
#include "gui/plot_style.h"
#include "gui/runs_model.h"
#include "storage/db/stats_at.h"

namespace fragscope::gui {

QString axisLabel(CompareAxis axis) {
  switch (axis) {
    case CompareAxis::events:
      return QObject::tr("event");
    case CompareAxis::share:
      return QObject::tr("% of each run's events");
    case CompareAxis::steps:
      return QObject::tr("optimizer step (setup before 0)");
    case CompareAxis::time:
      return QObject::tr("seconds since each run's first event");
  }
  return {};
}

QString compareRunLabel(const ComparedRun& run) {
  return QStringLiteral("#%1 %2")
      .arg(run.record.id.value)
      .arg(QString::fromStdString(run.record.name));
}

QCPGraph* plotRunCurves(QCustomPlot* plot, const ComparedRun& run, const QColor& color,
                        CompareAxis axis, const QString& name) {
  const RunCurves curves = runCurves(run, axis);
  if (curves.keys.isEmpty())
    return nullptr;
  QCPGraph* reservedGraph = plot->addGraph();
  reservedGraph->setName(name);
  reservedGraph->setPen(QPen(color, 1.8));
  reservedGraph->setLineStyle(QCPGraph::lsStepLeft);
  reservedGraph->setData(curves.keys, curves.reserved, true);
  QCPGraph* allocatedGraph = plot->addGraph();
  allocatedGraph->setName(name + QObject::tr(" · allocated"));
  allocatedGraph->setPen(QPen(color, 1.2, Qt::DashLine));
  allocatedGraph->setLineStyle(QCPGraph::lsStepLeft);
  allocatedGraph->setData(curves.keys, curves.allocated, true);
  allocatedGraph->removeFromLegend();
  return reservedGraph;
}

QCPGraph* plotRunOoms(QCustomPlot* plot, const ComparedRun& run, const QColor& color,
                      CompareAxis axis) {
  const RunCurves curves = runCurves(run, axis);
  if (curves.oomKeys.isEmpty())
    return nullptr;
  QCPGraph* graph = plot->addGraph();
  graph->setName(QObject::tr("%1 · OOM").arg(QString::fromStdString(run.record.name)));
  graph->setLineStyle(QCPGraph::lsNone);
  graph->setScatterStyle(
      QCPScatterStyle(QCPScatterStyle::ssCross, QPen(colors::oom, 2.4), color, 13));
  graph->setData(curves.oomKeys, curves.oomValues, true);
  graph->removeFromLegend();
  return graph;
}

namespace {
constexpr double kLimitNearPeak = 1.5;
}  // namespace

double comparisonTop(const ComparisonData& data) {
  double peak = 0;
  for (const ComparedRun& run : data.runs) {
    peak = std::max(peak, static_cast<double>(summaryPeak(run.record, "reserved")));
    for (const auto& bucket : run.timeline)
      peak = std::max(peak, static_cast<double>(bucket.max.reserved));
  }
  double top = peak;
  for (const ComparedRun& run : data.runs)
    if (const auto limit = storage::run_memory_limit(run.record);
        limit && static_cast<double>(*limit) <= kLimitNearPeak * peak)
      top = std::max(top, static_cast<double>(*limit));
  return top;
}

std::vector<QCPGraph*> plotMemoryLimits(QCustomPlot* plot, const ComparisonData& data, double left,
                                        double right, double top) {
  std::vector<Bytes> limits;
  for (const ComparedRun& run : data.runs)
    if (const auto limit = storage::run_memory_limit(run.record);
        limit && std::find(limits.begin(), limits.end(), *limit) == limits.end())
      limits.push_back(*limit);
  std::vector<QCPGraph*> lines;
  for (const Bytes limit : limits) {
    QStringList owners;
    for (const ComparedRun& run : data.runs)
      if (storage::run_memory_limit(run.record) == limit)
        owners << QString::fromStdString(run.record.name);
    QCPGraph* line = plot->addGraph();
    const auto y = static_cast<double>(limit);
    line->setData({left, right}, {y, y}, true);
    line->setPen(QPen(colors::oom, 1.4, Qt::DotLine));
    QString name =
        limits.size() == 1
            ? formatAllowed(y)
            : QObject::tr("%1 allowed (%2)").arg(formatBytes(y), owners.join(QStringLiteral(", ")));
    if (y > top * 1.08)
      name += QObject::tr(", above the plot");
    line->setName(name);
    lines.push_back(line);
  }
  return lines;
}

namespace {

// Step k + the share of step k's events gone by; before step 0 the setup spans [-1, 0); after
// the last recorded start, the last step's length goes on (a run that stopped mid-step).
double eventStep(const std::vector<std::uint64_t>& firsts, std::uint64_t event,
                 std::uint64_t events) {
  const auto after = std::upper_bound(firsts.begin(), firsts.end(), event);
  const auto step = static_cast<std::size_t>(after - firsts.begin());
  const auto at = [&](std::size_t k) { return static_cast<double>(firsts[k]); };
  const auto e = static_cast<double>(event);
  if (step == 0)
    return at(0) > 0 ? e / at(0) - 1.0 : 0.0;
  double length = 0;
  if (step < firsts.size())
    length = at(step) - at(step - 1);
  else if (firsts.size() >= 2)
    length = at(step - 1) - at(step - 2);
  else
    length = static_cast<double>(events) - at(0);
  return static_cast<double>(step - 1) + (length > 0 ? (e - at(step - 1)) / length : 0.0);
}

}  // namespace

std::optional<double> compareKey(const ComparedRun& run, CompareAxis axis, std::uint64_t event,
                                 std::int64_t timeUs) {
  const auto events = std::max<std::uint64_t>(run.record.event_count, 1);
  switch (axis) {
    case CompareAxis::events:
      return static_cast<double>(event);
    case CompareAxis::share:
      return 100.0 * static_cast<double>(event) / static_cast<double>(events);
    case CompareAxis::steps:
      if (!run.stepFirstEvents.empty())
        return eventStep(run.stepFirstEvents, event, events);
      if (!run.stepEndsUs.empty() && timeUs != 0)
        return stepCoordinate(run.stepEndsUs, static_cast<double>(run.firstTimeUs),
                              static_cast<double>(timeUs));
      return std::nullopt;
    case CompareAxis::time:
      if (run.firstTimeUs == 0 || timeUs == 0)
        return std::nullopt;
      return static_cast<double>(timeUs - run.firstTimeUs) / 1e6;
  }
  return std::nullopt;
}

QString axisGap(const ComparedRun& run, CompareAxis axis) {
  const QString name = QString::fromStdString(run.record.name);
  if (axis == CompareAxis::steps && run.stepFirstEvents.empty() &&
      (run.stepEndsUs.empty() || run.firstTimeUs == 0))
    return QObject::tr("%1: no optimizer steps recorded").arg(name);
  if (axis == CompareAxis::time && run.firstTimeUs == 0)
    return QObject::tr("%1: no timestamps (a simulated run or a PyTorch 2.0 trace)").arg(name);
  return {};
}

CompareAxis preferredAxis(const ComparisonData& data) {
  if (data.runs.empty())
    return CompareAxis::events;
  const bool allSteps = std::all_of(data.runs.begin(), data.runs.end(), [](const ComparedRun& run) {
    return axisGap(run, CompareAxis::steps).isEmpty();
  });
  if (allSteps && data.runs.size() >= 2)
    return CompareAxis::steps;
  std::uint64_t longest = 1, shortest = std::numeric_limits<std::uint64_t>::max();
  for (const ComparedRun& run : data.runs) {
    longest = std::max(longest, run.record.event_count);
    shortest = std::min(shortest, run.record.event_count);
  }
  return shortest > 0 && longest > 2 * shortest ? CompareAxis::share : CompareAxis::events;
}

RunCurves runCurves(const ComparedRun& run, CompareAxis axis) {
  RunCurves curves;
  if (!axisGap(run, axis).isEmpty())
    return curves;
  for (const storage::TimelineBucket& bucket : run.timeline) {
    const auto key = compareKey(run, axis, bucket.first_event, bucket.t0_us);
    if (!key)
      continue;
    curves.keys.push_back(*key);
    curves.reserved.push_back(static_cast<double>(bucket.max.reserved));
    curves.allocated.push_back(static_cast<double>(bucket.max.allocated));
  }
  if (!run.timeline.empty() && !curves.keys.empty()) {
    const storage::TimelineBucket& last = run.timeline.back();
    const auto end = compareKey(run, axis, last.end_event, last.t1_us);
    curves.keys.push_back(end ? std::max(*end, curves.keys.back()) : curves.keys.back());
    curves.reserved.push_back(curves.reserved.back());
    curves.allocated.push_back(curves.allocated.back());
    curves.lastKey = curves.keys.back();
  }
  for (std::size_t i = 0; i < run.oomEvents.size(); ++i) {
    const std::int64_t time = i < run.oomTimesUs.size() ? run.oomTimesUs[i] : 0;
    const auto key = compareKey(run, axis, run.oomEvents[i], time);
    if (!key)
      continue;
    // Reserved at the OOM: the bucket holding it.
    double reserved = 0;
    for (const storage::TimelineBucket& bucket : run.timeline)
      if (bucket.first_event <= run.oomEvents[i] && run.oomEvents[i] < bucket.end_event)
        reserved = static_cast<double>(bucket.max.reserved);
    if (reserved == 0 && !curves.reserved.isEmpty())
      reserved = curves.reserved.back();
    curves.oomKeys.push_back(*key);
    curves.oomValues.push_back(reserved);
  }
  return curves;
}

// ---- What differs ---------------------------------------------------------------------------

namespace {

const QString kUnknown = QStringLiteral("\u2014");

QString jsonText(const nlohmann::json& value) {
  if (value.is_string())
    return QString::fromStdString(value.get<std::string>());
  if (value.is_boolean())
    return value.get<bool>() ? QObject::tr("yes") : QObject::tr("no");
  if (value.is_object()) {
    QStringList parts;
    for (const auto& [key, item] : value.items())
      parts << QStringLiteral("%1 %2").arg(QString::fromStdString(key), jsonText(item));
    return parts.join(QStringLiteral(", "));
  }
  if (value.is_array()) {
    QStringList parts;
    for (const auto& item : value)
      parts << jsonText(item);
    return parts.join(QStringLiteral(", "));
  }
  return QString::fromStdString(value.dump());
}

// A sequence length as a person says it: "1024" for a fixed one, "lognormal median 700, σ 0.5,
// 128–2048" for a distribution.
QString seqLenText(const nlohmann::json& value) {
  if (!value.is_object())
    return jsonText(value);
  const std::string kind = value.value("kind", std::string("fixed"));
  if (kind == "fixed")
    return value.contains("value") ? jsonText(value["value"]) : jsonText(value);
  QString text = QString::fromStdString(kind);
  if (value.contains("median"))
    text += QObject::tr(" median %1").arg(jsonText(value["median"]));
  if (value.contains("sigma"))
    text += QObject::tr(", σ %1").arg(jsonText(value["sigma"]));
  if (value.contains("min") && value.contains("max"))
    text += QStringLiteral(", %1–%2").arg(jsonText(value["min"]), jsonText(value["max"]));
  if (value.contains("values"))
    text += QStringLiteral(" ") + jsonText(value["values"]);
  return text;
}

const nlohmann::json* find(const nlohmann::json& root, const std::string& dotted) {
  const nlohmann::json* node = &root;
  std::size_t start = 0;
  while (start <= dotted.size()) {
    const std::size_t dot = dotted.find('.', start);
    const std::string key = dotted.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!node->is_object() || !node->contains(key))
      return nullptr;
    node = &(*node)[key];
    if (dot == std::string::npos)
      break;
    start = dot + 1;
  }
  return node;
}

void flatten(const nlohmann::json& node, const std::string& prefix,
             std::map<std::string, const nlohmann::json*>& out) {
  if (node.is_object() && !node.empty()) {
    for (const auto& [key, item] : node.items())
      flatten(item, prefix.empty() ? key : prefix + "." + key, out);
    return;
  }
  out[prefix] = &node;
}

// The settings people change to make a run fit, with the value the experiment format uses when
// the configuration leaves a key out (so an explicit default is not shown as a difference).
struct KnownSetting {
  const char* key;
  const char* label;
  const char* fallback;  // nullptr: unknown when absent
};
constexpr KnownSetting kWorkload[] = {
    {"model.kind", "Model", "gpt"},
    {"model.layers", "Layers", nullptr},
    {"model.hidden", "Hidden size", nullptr},
    {"training.batch_size", "Micro-batch", nullptr},
    {"training.grad_accum", "Gradient accumulation", "1"},
    {"training.seq_len", "Sequence length", nullptr},
    {"training.checkpointing", "Activation checkpointing", "none"},
    {"training.compile", "torch.compile", "no"},
    {"training.optimizer", "Optimizer", "adamw"},
    {"training.precision", "Precision", nullptr},
    {"training.hold_logits", "Logits held through backward", "yes"},
    {"training.steps", "Optimizer steps", nullptr},
};

// The options of the config a run ran under (storage::allocator_config_of: an import's recorded
// allocator_settings, else its alloc_conf, read by the allocator's own parser, so
// "roundup_power2_divisions:[256:1,>:2]" stays one option), named as PYTORCH_CUDA_ALLOC_CONF
// names them; options at their defaults are left out. A recording and a simulated run of the
// same settings thus show the same rows. A config that does not parse, or that no string
// expresses, sets none here (the whole string still shows above).
std::map<std::string, std::string> allocConfPairs(const storage::RunRecord& record) {
  try {
    const auto options = alloc::alloc_conf_options(storage::allocator_config_of(record).config);
    return {options.begin(), options.end()};
  } catch (const std::exception&) {  // InputError, or AllocatorConfigError from the options
    return {};
  }
}

void markDifferences(SettingRow& row) {
  row.differs = std::any_of(row.values.begin(), row.values.end(),
                            [&](const QString& value) { return value != row.values.front(); });
}

}  // namespace

std::vector<SettingRow> settingRows(const ComparisonData& data) {
  std::vector<SettingRow> rows;
  if (data.runs.empty())
    return rows;
  static const nlohmann::json kNone = nlohmann::json::object();
  const auto configOf = [](const ComparedRun& run) -> const nlohmann::json& {
    const auto it = run.record.summary.find("config");
    return it != run.record.summary.end() && it->is_object() ? *it : kNone;
  };
  const bool anyConfig = std::any_of(data.runs.begin(), data.runs.end(),
                                     [&](const auto& run) { return !configOf(run).empty(); });

  // Workload: the known settings, then any other key of the configurations that differs.
  std::set<std::string> shown;
  if (anyConfig) {
    for (const KnownSetting& known : kWorkload) {
      SettingRow row{
          QObject::tr("Workload"),
          QStringLiteral("%1 (%2)").arg(QObject::tr(known.label), QLatin1String(known.key)),
          {},
          false};
      for (const ComparedRun& run : data.runs) {
        const nlohmann::json& config = configOf(run);
        const nlohmann::json* value = find(config, known.key);
        if (value)
          row.values.push_back(std::string_view(known.key) == "training.seq_len"
                                   ? seqLenText(*value)
                                   : jsonText(*value));
        else
          row.values.push_back(
              !config.empty() && known.fallback ? QString::fromLatin1(known.fallback) : kUnknown);
      }
      markDifferences(row);
      rows.push_back(std::move(row));
      shown.insert(known.key);
    }
    std::map<std::string, std::vector<QString>> others;
    std::vector<std::map<std::string, const nlohmann::json*>> flat(data.runs.size());
    for (std::size_t i = 0; i < data.runs.size(); ++i)
      flatten(configOf(data.runs[i]), {}, flat[i]);
    std::set<std::string> keys;
    for (const auto& run : flat)
      for (const auto& [key, unused] : run)
        keys.insert(key);
    for (const std::string& key : keys) {
      // Shown above (or under the allocator), or a part of a setting shown above.
      const bool covered = std::any_of(shown.begin(), shown.end(), [&](const std::string& done) {
        return key == done || key.rfind(done + ".", 0) == 0;
      });
      if (covered || key.empty() || key == "name" || key == "description" ||
          key.rfind("allocator.", 0) == 0 || key.rfind("device.", 0) == 0)
        continue;
      SettingRow row{QObject::tr("Workload"), QString::fromStdString(key), {}, false};
      for (const auto& run : flat) {
        const auto it = run.find(key);
        row.values.push_back(it == run.end() ? kUnknown : jsonText(*it->second));
      }
      markDifferences(row);
      if (row.differs)
        rows.push_back(std::move(row));
    }
  }

  // Allocator: the whole alloc_conf, then each setting the config of any run makes.
  {
    SettingRow conf{QObject::tr("Allocator"), QObject::tr("PYTORCH_CUDA_ALLOC_CONF"), {}, false};
    std::vector<std::map<std::string, std::string>> settings;
    for (const ComparedRun& run : data.runs) {
      conf.values.push_back(run.record.alloc_conf.empty()
                                ? QObject::tr("(default)")
                                : QString::fromStdString(run.record.alloc_conf));
      settings.push_back(allocConfPairs(run.record));
    }
    markDifferences(conf);
    rows.push_back(std::move(conf));
    std::set<std::string> keys;
    for (const auto& run : settings)
      for (const auto& [key, unused] : run)
        keys.insert(key);
    for (const std::string& key : keys) {
      SettingRow row{QObject::tr("Allocator"), QString::fromStdString(key), {}, false};
      for (const auto& run : settings) {
        const auto it = run.find(key);
        row.values.push_back(it == run.end() ? QObject::tr("default")
                                             : QString::fromStdString(it->second));
      }
      markDifferences(row);
      rows.push_back(std::move(row));
    }
  }

  // Device and where the run came from.
  {
    SettingRow device{QObject::tr("Device"), QObject::tr("Device"), {}, false};
    SettingRow limit{QObject::tr("Device"), QObject::tr("Memory limit"), {}, false};
    SettingRow source{QObject::tr("Device"), QObject::tr("Source"), {}, false};
    SettingRow torch{QObject::tr("Device"), QObject::tr("PyTorch"), {}, false};
    for (const ComparedRun& run : data.runs) {
      device.values.push_back(run.record.device_name.empty()
                                  ? kUnknown
                                  : QString::fromStdString(run.record.device_name));
      const auto cap = storage::run_memory_limit(run.record);
      limit.values.push_back(cap ? formatBytes(static_cast<double>(*cap)) : kUnknown);
      source.values.push_back(QString::fromLatin1(to_string(run.record.source)));
      torch.values.push_back(run.record.environment.torch_version.empty()
                                 ? kUnknown
                                 : QString::fromStdString(run.record.environment.torch_version));
    }
    for (SettingRow* row : {&device, &limit, &source, &torch}) {
      markDifferences(*row);
      rows.push_back(std::move(*row));
    }
  }
  return rows;
}

SettingsModel::SettingsModel(QObject* parent) : QAbstractTableModel(parent) {}

int SettingsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int SettingsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runNames.size());
}

QVariant SettingsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const SettingRow& row = m_rows[static_cast<std::size_t>(index.row())];
  const QString& value = row.values[static_cast<std::size_t>(index.column())];
  const bool different = index.column() > 0 && value != row.values.front();
  switch (role) {
    case Qt::DisplayRole:
    case Qt::ToolTipRole:
      return value;
    case DiffersRole:
      return different;
    case Qt::BackgroundRole:
      return different ? QVariant(QColor(0xf2, 0xc1, 0x4e, 90)) : QVariant();
    case Qt::FontRole:
      if (row.differs) {
        QFont font;
        font.setBold(true);
        return font;
      }
      return {};
    default:
      return {};
  }
}

QVariant SettingsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (section < 0)
    return {};
  if (orientation == Qt::Horizontal && section < static_cast<int>(m_runNames.size()) &&
      role == Qt::DisplayRole)
    return m_runNames[static_cast<std::size_t>(section)];
  if (orientation == Qt::Vertical && section < static_cast<int>(m_rows.size())) {
    const SettingRow& row = m_rows[static_cast<std::size_t>(section)];
    if (role == Qt::DisplayRole)
      return QStringLiteral("%1 · %2").arg(row.group, row.setting);
    if (role == Qt::FontRole && row.differs) {
      QFont font;
      font.setBold(true);
      return font;
    }
  }
  return {};
}

void SettingsModel::resetData(const ComparisonData& data) {
  beginResetModel();
  m_runNames.clear();
  for (const ComparedRun& run : data.runs)
    m_runNames.push_back(QStringLiteral("#%1 %2")
                             .arg(run.record.id.value)
                             .arg(QString::fromStdString(run.record.name)));
  m_rows = settingRows(data);
  endResetModel();
}

int SettingsModel::rowOf(const QString& setting) const {
  for (std::size_t i = 0; i < m_rows.size(); ++i) {
    const QString label = m_rows[i].setting.section(QStringLiteral(" ("), 0, 0);
    if (label == setting || m_rows[i].setting == setting)
      return static_cast<int>(i);
  }
  return -1;
}

}  // namespace fragscope::gui
