#include "gui/summary_page.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QScrollBar>
#include <QVBoxLayout>

#include "engine/allocator/summary.h"
#include "engine/analysis/recorded_environment.h"
#include "gui/format.h"
#include "gui/pool_overview.h"
#include "gui/runs_model.h"
#include "gui/segment_layout.h"
#include "storage/db/stats_at.h"
#include "storage/db/stats_keyframes.h"

namespace fragscope::gui {

namespace {
QString row(const QString& name, const QString& current, const QString& peak = {}) {
  return QStringLiteral("| %1 | %2 | %3 |\n").arg(name, -34).arg(current, 14).arg(peak, 14);
}
QString rule() {
  return QStringLiteral("|") + QString(72, QLatin1Char('-')) + QStringLiteral("|\n");
}
}  // namespace

SegmentMapSummary summaryFigures(const SegmentSnapshotAt& state, const PyTorchSummaryAt* model) {
  SegmentMapSummary figures = state.summary;
  if (!model || model->diverged || model->run != state.run ||
      model->eventIndex != state.eventIndex ||
      model->modelReserved != static_cast<std::int64_t>(figures.reserved))
    return figures;
  // A wholly free segment holds no block, so the map has it exactly; the rest of the free bytes
  // (reserved - active_bytes) lie in split segments (inactive_split_bytes) or expandable ones.
  const auto free =
      static_cast<Bytes>(std::max<std::int64_t>(0, model->modelReserved - model->modelActiveBytes));
  figures.freeInSplit = static_cast<Bytes>(std::max<std::int64_t>(0, model->modelInactiveSplit));
  figures.freeWhole = std::min(figures.freeWhole, free);
  figures.freeExpandable = free - std::min(free, figures.freeInSplit + figures.freeWhole);
  figures.largestFree = std::min(figures.largestFree, free);
  figures.externalFragmentation =
      free > 0 ? 1.0 - static_cast<double>(figures.largestFree) / static_cast<double>(free) : 0;
  return figures;
}

QString stateSummaryText(const storage::RunRecord& run, const SegmentSnapshotAt* state,
                         const QString& recordedEnvironment, const PyTorchSummaryAt* model) {
  const auto bytes = [](std::int64_t value) { return formatBytes(static_cast<double>(value)); };
  QString text;
  text += rule();
  text += QStringLiteral("| %1 |\n")
              .arg(QObject::tr("FragScope state summary — run %1: %2")
                       .arg(run.id.value)
                       .arg(QString::fromStdString(run.name)),
                   -70);
  text += rule();
  if (state) {
    text += QStringLiteral("| %1 |\n")
                .arg(QObject::tr("after event %1 of %2")
                         .arg(formatCount(state->eventIndex), formatCount(state->eventCount)),
                     -70);
    text += rule();
  }
  if (state && !state->pools.empty()) {
    // Default vs private pools (CUDA graphs, MemPool): cached memory is not shared across them.
    for (const QString& line : poolOverviewText(state->pools).split(QLatin1Char('\n')))
      text += QStringLiteral("| %1 |\n").arg(line, -70);
    text += rule();
  }
  text += row(QObject::tr("Metric"), QObject::tr("At cursor"), QObject::tr("Run peak"));
  text += rule();
  if (state) {
    const SegmentMapSummary summary = summaryFigures(*state, model);
    text += row(QObject::tr("Reserved memory"), bytes(static_cast<std::int64_t>(summary.reserved)),
                bytes(summaryPeak(run, "reserved")));
    // PyTorch's requested_bytes, its peak too (the allocated peak counts rounded blocks); a run
    // stored before the store kept that peak shows none.
    const std::int64_t requestedPeak = summaryPeak(run, "requested");
    text += row(QObject::tr("Live blocks (request bytes)"),
                bytes(static_cast<std::int64_t>(summary.live)),
                requestedPeak > 0 ? bytes(requestedPeak) : QString());
    text += row(QObject::tr("  of which pending free"),
                bytes(static_cast<std::int64_t>(summary.pendingFree)));
    text += row(QObject::tr("Free in split segments"),
                bytes(static_cast<std::int64_t>(summary.freeInSplit)));
    if (summary.expandableRanges > 0)
      text += row(QObject::tr("Free in expandable segments"),
                  bytes(static_cast<std::int64_t>(summary.freeExpandable)));
    text += row(QObject::tr("Free whole segments"),
                bytes(static_cast<std::int64_t>(summary.freeWhole)));
    text += row(QObject::tr("Largest free block"),
                bytes(static_cast<std::int64_t>(summary.largestFree)));
    text += row(QObject::tr("External fragmentation"),
                QString::number(summary.externalFragmentation * 100, 'f', 1) + QLatin1Char('%'));
    text += row(QObject::tr("Segments"), QString::number(summary.segments));
    if (summary.expandableRanges > 0)
      text +=
          row(QObject::tr("Expandable mapped ranges"), QString::number(summary.expandableRanges));
    text += row(QObject::tr("Live blocks"), QString::number(summary.blocks));
  } else {
    text += row(QObject::tr("Reserved memory"), QString(), bytes(summaryPeak(run, "reserved")));
    text += row(QObject::tr("Allocated memory"), QString(), bytes(summaryPeak(run, "allocated")));
    text += row(QObject::tr("Active memory"), QString(), bytes(summaryPeak(run, "active")));
  }
  text += rule();
  text += QStringLiteral("\n");
  const auto field = [&text](const QString& name, const std::string& value) {
    if (!value.empty())
      text += QStringLiteral("%1 %2\n")
                  .arg(name + QLatin1Char(':'), -20)
                  .arg(QString::fromStdString(value));
  };
  field(QObject::tr("Source"), std::string(to_string(run.source)));
  field(QObject::tr("Outcome"), std::string(to_string(run.status)));
  field(QObject::tr("Allocator config"), run.alloc_conf.empty() ? "(default)" : run.alloc_conf);
  field(QObject::tr("Allocator rules"), storage::profile_choice_of(run).describe());
  field(QObject::tr("Device"), run.device_name);
  if (run.capacity)
    field(QObject::tr("Capacity"), formatBytes(static_cast<double>(run.capacity)).toStdString());
  field(QObject::tr("Events"), formatCount(run.event_count).toStdString());
  field(QObject::tr("Created"), run.created_at);
  field(QObject::tr("PyTorch"), run.environment.torch_version);
  field(QObject::tr("CUDA"), run.environment.cuda_version);
  field(QObject::tr("Driver"), run.environment.driver_version);
  field(QObject::tr("GPU"), run.environment.gpu_name);
  field(QObject::tr("FragScope"), run.environment.fragscope_version);
  field(QObject::tr("Host"), run.environment.host);
  if (!recordedEnvironment.isEmpty()) {
    text += QStringLiteral("\n") + QObject::tr("Recorded environment (NAME.env.json):") +
            QStringLiteral("\n");
    for (const QString& line : recordedEnvironment.split(QLatin1Char('\n'), Qt::SkipEmptyParts))
      text += QStringLiteral("  ") + line + QLatin1Char('\n');
  }
  const auto stats = run.summary.find("memory_stats");
  if (stats != run.summary.end() && stats->is_object()) {
    text += QStringLiteral("\n") + QObject::tr("Recorded memory_stats():") + QStringLiteral("\n");
    for (const auto& [key, value] : stats->items())
      text += QStringLiteral("  %1 %2\n")
                  .arg(QString::fromStdString(key), -48)
                  .arg(QString::fromStdString(value.dump()));
  }
  return text;
}

PyTorchSummaryAt loadPyTorchSummary(const QString& databasePath, storage::RunId run,
                                    std::uint64_t eventIndex, const CancelToken& cancel) {
  auto store = openReader(databasePath);
  const storage::MemoryStatsAt state = storage::memory_stats_at(
      *store, run, eventIndex, storage::StatsStart::nearest_keyframe, cancel);
  PyTorchSummaryAt out;
  out.run = run;
  out.eventIndex = state.event_index;
  out.eventCount = state.event_count;
  out.full = QString::fromStdString(alloc::memory_summary(state.stats, 0, false));
  out.abbreviated = QString::fromStdString(alloc::memory_summary(state.stats, 0, true));
  out.config = QString::fromStdString(state.config);
  out.torchVersion = QString::fromStdString(state.profile.version.to_string());
  for (const auto& caveat : state.caveats)
    out.caveats << QString::fromStdString(caveat);
  out.diverged = state.diverged;
  using alloc::StatType;
  out.modelReserved = state.stats.reserved_bytes[StatType::aggregate].current;
  out.modelSegments = state.stats.segment[StatType::aggregate].current;
  out.modelRequested = state.stats.requested_bytes[StatType::aggregate].current;
  out.modelAllocations = state.stats.active[StatType::aggregate].current;
  out.modelActiveBytes = state.stats.active_bytes[StatType::aggregate].current;
  out.modelInactiveSplit = state.stats.inactive_split_bytes[StatType::aggregate].current;
  if (state.replayed_from == 0 && state.event_index > storage::kStatsKeyframeInterval) {
    const storage::RunRecord record = store->run(run);
    const auto outcome = record.summary.find("stats_keyframes");
    out.noKeyframes =
        outcome != record.summary.end() && outcome->is_object() && outcome->contains("none")
            ? QString::fromStdString((*outcome)["none"].get<std::string>())
            : QObject::tr("it was stored before FragScope kept them");
  }
  if (const auto fingerprint = store->recorded_environment(run))
    out.recordedEnvironment = QString::fromStdString(analysis::to_text(
        analysis::parse_recorded_environment(*fingerprint, "run " + std::to_string(run.value))));
  return out;
}

QString divergenceText(const PyTorchSummaryAt& model, const SegmentSnapshotAt& recorded) {
  const SegmentMapSummary& trace = recorded.summary;
  auto row = [](const QString& metric, const QString& fromTrace, const QString& fromModel) {
    return QStringLiteral("  %1 %2 %3\n").arg(metric, -26).arg(fromTrace, 16).arg(fromModel, 16);
  };
  QString text = QObject::tr(
                     "The model's replay diverged from this recording, so the "
                     "memory_summary() table further down is the model's, not what "
                     "PyTorch had. What the recording says after event %1:")
                     .arg(formatCount(recorded.eventIndex)) +
                 QStringLiteral("\n\n");
  text += row(QString(), QObject::tr("recording"), QObject::tr("model replay"));
  text += row(QObject::tr("Reserved memory"), formatBytes(static_cast<double>(trace.reserved)),
              formatBytes(static_cast<double>(model.modelReserved)));
  text +=
      row(QObject::tr("Segments"), formatCount(trace.segments),
          formatCount(static_cast<std::uint64_t>(std::max<std::int64_t>(0, model.modelSegments))));
  text += row(QObject::tr("Live (requested bytes)"), formatBytes(static_cast<double>(trace.live)),
              formatBytes(static_cast<double>(model.modelRequested)));
  text += row(
      QObject::tr("Live blocks"), formatCount(trace.blocks),
      formatCount(static_cast<std::uint64_t>(std::max<std::int64_t>(0, model.modelAllocations))));
  if (recorded.eventIndex != model.eventIndex)
    text +=
        QObject::tr("  (the model's figures are after event %1, the end of that allocator call)")
            .arg(formatCount(model.eventIndex)) +
        QLatin1Char('\n');
  text += QObject::tr(
              "The recording's figures are what the segment map, the timeline and "
              "`fragscope-cli info` show.") +
          QStringLiteral("\n\n");
  return text;
}

SummaryPage::SummaryPage(QWidget* parent)
    : QWidget(parent),
      m_abbreviated(new QCheckBox(tr("Abbreviated"), this)),
      m_status(new QLabel(this)),
      m_text(new QPlainTextEdit(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  auto* bar = new QHBoxLayout;
  m_abbreviated->setToolTip(
      tr("memory_summary(abbreviated=True): only the totals, without the pool rows"));
  bar->addWidget(m_abbreviated);
  bar->addWidget(m_status, 1);
  layout->addLayout(bar);
  m_text->setReadOnly(true);
  m_text->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  layout->addWidget(m_text);
  m_debounce.setSingleShot(true);
  m_debounce.setInterval(120);
  connect(&m_debounce, &QTimer::timeout, this, &SummaryPage::requestReplay);
  connect(m_abbreviated, &QCheckBox::toggled, this, &SummaryPage::refresh);
  clear();
}

void SummaryPage::setRun(const storage::RunRecord& run) {
  m_run = run;
  m_state.reset();
  m_pytorch.reset();
  m_replayError.clear();
  m_replay.cancel();
  m_keyframes.cancel();
  if (storage::stats_keyframes_missing(run) && !m_databasePath.isEmpty()) {
    m_debounce.stop();
    m_status->setText(tr("Storing allocator-state keyframes for this run (once: every later "
                         "cursor replays at most %1 events)…")
                          .arg(formatCount(storage::kStatsKeyframeInterval)));
    const QString database = m_databasePath;
    const storage::RunId id = run.id;
    m_keyframes.start(
        [database, id](const JobContext& job) {
          return storage::backfill_stats_keyframes(database.toStdString(), id,
                                                   job.workControl().cancel);
        },
        [this](bool) { requestReplay(); },
        // Not stored: the replay starts at event 0, and the page says why.
        [this](const QString&) { requestReplay(); });
  } else {
    m_debounce.start();
  }
  refresh();
}

void SummaryPage::setState(const SegmentSnapshotAt& state) {
  if (m_run && state.run == m_run->id) {
    // Only the figures: copying the block map of a large run would cost the GUI thread.
    SegmentSnapshotAt figures;
    figures.run = state.run;
    figures.eventIndex = state.eventIndex;
    figures.eventCount = state.eventCount;
    figures.summary = state.summary;
    figures.pools = state.pools;
    m_state = std::move(figures);
    m_debounce.start();
    refresh();
  }
}

void SummaryPage::clear() {
  m_run.reset();
  m_state.reset();
  m_pytorch.reset();
  m_replay.cancel();
  m_keyframes.cancel();
  m_debounce.stop();
  m_status->clear();
  m_text->setPlainText(tr("Select a run to see its summary."));
}

void SummaryPage::requestReplay() {
  if (!m_run || m_databasePath.isEmpty())
    return;
  // The keyframes' job asks again once they are stored.
  if (m_keyframes.busy())
    return;
  const storage::RunId run = m_run->id;
  const std::uint64_t eventIndex = m_state ? m_state->eventIndex : m_run->event_count;
  m_status->setText(tr("Replaying %1 events…").arg(formatCount(eventIndex)));
  const QString database = m_databasePath;
  m_replay.start(
      [database, run, eventIndex](const JobContext& job) {
        return loadPyTorchSummary(database, run, eventIndex, job.workControl().cancel);
      },
      [this](PyTorchSummaryAt summary) {
        m_pytorch = std::move(summary);
        m_replayError.clear();
        refresh();
        emit pytorchSummaryReady();
      },
      [this](const QString& message) {
        m_pytorch.reset();
        m_replayError = message;
        refresh();
      });
}

void SummaryPage::refresh() {
  if (!m_run)
    return;
  QString text;
  if (m_pytorch && m_pytorch->run == m_run->id) {
    m_status->setText(
        (m_pytorch->diverged
             ? tr("<b>Model replay, diverged from the recording:</b> memory_summary() after "
                  "event %1 of %2 under \"%3\"; the recording's figures come first")
             : tr("torch.cuda.memory_summary() after event %1 of %2, replayed under \"%3\""))
            .arg(formatCount(m_pytorch->eventIndex), formatCount(m_pytorch->eventCount),
                 m_pytorch->config.isEmpty() ? tr("the defaults") : m_pytorch->config) +
        tr(" with PyTorch %1's allocator rules").arg(m_pytorch->torchVersion));
    if (m_pytorch->diverged && m_state)
      text += divergenceText(*m_pytorch, *m_state);
    for (const QString& caveat : m_pytorch->caveats)
      text += tr("Note: %1.").arg(caveat) + QLatin1Char('\n');
    if (!m_pytorch->noKeyframes.isEmpty())
      text += tr("Note: replayed from event 0 (%1 events): this run has no allocator-state "
                 "keyframes (%2).")
                  .arg(formatCount(m_pytorch->eventIndex), m_pytorch->noKeyframes) +
              QLatin1Char('\n');
    if (!m_pytorch->caveats.isEmpty() || !m_pytorch->noKeyframes.isEmpty())
      text += QLatin1Char('\n');
    text += m_abbreviated->isChecked() ? m_pytorch->abbreviated : m_pytorch->full;
    text += QLatin1Char('\n');
  } else if (!m_replayError.isEmpty()) {
    m_status->setText(tr("memory_summary() could not be computed: %1").arg(m_replayError));
  }
  const bool ownRun = m_pytorch && m_pytorch->run == m_run->id;
  text += stateSummaryText(*m_run, m_state ? &*m_state : nullptr,
                           ownRun ? m_pytorch->recordedEnvironment : QString(),
                           ownRun ? &*m_pytorch : nullptr);
  // Keep the reader's place while stepping through events.
  const int scroll = m_text->verticalScrollBar()->value();
  m_text->setPlainText(text);
  m_text->verticalScrollBar()->setValue(scroll);
}

}  // namespace fragscope::gui
