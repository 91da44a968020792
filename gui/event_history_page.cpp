#include "gui/event_history_page.h"

#include <QFontMetrics>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QRegularExpression>
#include <QVBoxLayout>
#include <algorithm>

#include "gui/format.h"
#include "gui/run_data.h"

namespace fragscope::gui {

namespace {
constexpr std::uint64_t kRowsPerPage = 512;
constexpr std::size_t kPagesKept = 64;
constexpr std::uint64_t kEventsPerSearchRead = 1 << 16;

// The frame a user recognises: the innermost one outside PyTorch itself, else the innermost.
const Frame* userFrame(const std::vector<Frame>& frames) {
  for (const Frame& frame : frames) {
    const std::string& file = frame.filename;
    if (file.find("torch/") == std::string::npos && file.find("??") == std::string::npos &&
        !file.empty() && file.front() != '<')
      return &frame;
  }
  return frames.empty() ? nullptr : &frames.front();
}

bool frameMatches(const std::vector<Frame>* frames, const QString& text) {
  if (!frames)
    return false;
  const std::string needle = text.toLower().toStdString();
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  return std::any_of(frames->begin(), frames->end(), [&](const Frame& frame) {
    return lower(frame.name).find(needle) != std::string::npos ||
           lower(frame.filename).find(needle) != std::string::npos;
  });
}

bool matches(const TraceEvent& event, const EventQuery& query, const FrameStacks* stacks) {
  if (const auto* size = std::get_if<SizeQuery>(&query)) {
    if (event.action != TraceAction::alloc)
      return false;
    switch (size->compare) {
      case SizeQuery::Compare::at_least:
        return event.size >= size->bytes;
      case SizeQuery::Compare::at_most:
        return event.size <= size->bytes;
      case SizeQuery::Compare::equal:
        return event.size == size->bytes;
    }
    return false;
  }
  if (const auto* frame = std::get_if<FrameQuery>(&query))
    return (event.action == TraceAction::alloc || event.action == TraceAction::segment_alloc) &&
           frameMatches(stackOf(stacks, event.frames), frame->text);
  return false;
}
}  // namespace

EventListModel::EventListModel(QObject* parent) : QAbstractTableModel(parent) {}

void EventListModel::setRun(const QString& databasePath, storage::RunId run,
                            std::uint64_t eventCount, std::shared_ptr<const FrameStacks> stacks) {
  beginResetModel();
  m_store = openReader(databasePath);
  m_run = run;
  m_eventCount = eventCount;
  m_stacks = std::move(stacks);
  m_pages.clear();
  m_firstTimeUs = 0;
  if (eventCount > 0)
    if (const auto* first = page(0); first && !first->empty())
      m_firstTimeUs = first->front().time_us;
  endResetModel();
}

void EventListModel::clear() {
  beginResetModel();
  m_store.reset();
  m_eventCount = 0;
  m_pages.clear();
  m_stacks.reset();
  endResetModel();
}

const std::vector<TraceEvent>* EventListModel::page(std::uint64_t pageIndex) const {
  if (!m_store)
    return nullptr;
  auto found = m_pages.find(pageIndex);
  if (found == m_pages.end()) {
    if (m_pages.size() >= kPagesKept)
      m_pages.erase(m_pages.begin());
    const std::uint64_t first = pageIndex * kRowsPerPage;
    const std::uint64_t end = std::min(m_eventCount, first + kRowsPerPage);
    // One page is a keyframe chunk's worth of decoding at most: cheap enough for the view.
    found = m_pages.emplace(pageIndex, m_store->events(m_run, first, end)).first;
  }
  return &found->second;
}

std::optional<TraceEvent> EventListModel::event(std::uint64_t index) const {
  if (index >= m_eventCount)
    return std::nullopt;
  const auto* events = page(index / kRowsPerPage);
  const std::uint64_t offset = index % kRowsPerPage;
  if (!events || offset >= events->size())
    return std::nullopt;
  return (*events)[offset];
}

int EventListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(std::min<std::uint64_t>(m_eventCount, INT32_MAX));
}

int EventListModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : Column::ColumnCount;
}

QVariant EventListModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return {};
  switch (section) {
    case Column::EventColumn:
      return tr("Event");
    case Column::ActionColumn:
      return tr("Action");
    case Column::SizeColumn:
      return tr("Size");
    case Column::AddressColumn:
      return tr("Address");
    case Column::StreamColumn:
      return tr("Stream");
    case Column::TimeColumn:
      return tr("Time");
    case Column::FrameColumn:
      return tr("Where");
    default:
      return {};
  }
}

QVariant EventListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid())
    return {};
  const auto row = static_cast<std::uint64_t>(index.row());
  const auto event = this->event(row);
  if (!event)
    return {};
  if (role == Qt::ForegroundRole && event->action == TraceAction::oom)
    return colors::oom;
  if (role == Qt::TextAlignmentRole &&
      (index.column() == Column::EventColumn || index.column() == Column::SizeColumn))
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && index.column() == Column::FrameColumn)
    return blockStackHtml(m_stacks.get(), event->frames, 16);
  if (role != Qt::DisplayRole)
    return {};
  switch (index.column()) {
    case Column::EventColumn:
      return QString::number(row);
    case Column::ActionColumn:
      return QString::fromUtf8(to_string(event->action));
    case Column::SizeColumn:
      return formatBytes(static_cast<double>(event->size));
    case Column::AddressColumn:
      // An OOM's address field holds the device's free bytes.
      return event->action == TraceAction::oom
                 ? tr("%1 free").arg(formatBytes(static_cast<double>(event->addr)))
                 : QStringLiteral("0x") + QString::number(event->addr, 16);
    case Column::StreamColumn:
      return QString::number(event->stream.value);
    case Column::TimeColumn:
      return event->time_us == 0
                 ? QString()
                 : tr("%1 ms").arg(static_cast<double>(event->time_us - m_firstTimeUs) / 1000.0, 0,
                                   'f', 1);
    case Column::FrameColumn: {
      const auto* frames = stackOf(m_stacks.get(), event->frames);
      const Frame* frame = frames ? userFrame(*frames) : nullptr;
      if (!frame)
        return {};
      return QStringLiteral("%1 (%2:%3)")
          .arg(QString::fromStdString(frame->name),
               QString::fromStdString(frame->filename).section(QLatin1Char('/'), -1))
          .arg(frame->line);
    }
    default:
      return {};
  }
}

std::optional<EventQuery> parseEventQuery(const QString& input) {
  const QString text = input.trimmed();
  if (text.isEmpty())
    return std::nullopt;
  static const QRegularExpression eventNumber(QStringLiteral("^#?\\s*([0-9]+)$"));
  if (const auto match = eventNumber.match(text); match.hasMatch())
    return EventQuery{match.captured(1).toULongLong()};
  static const QRegularExpression size(
      QStringLiteral("^(>=|<=|>|<|=)?\\s*([0-9]+(?:\\.[0-9]+)?)\\s*(b|[kmgt]i?b?)?$"),
      QRegularExpression::CaseInsensitiveOption);
  if (const auto match = size.match(text);
      match.hasMatch() && (!match.captured(1).isEmpty() || !match.captured(3).isEmpty())) {
    double bytes = match.captured(2).toDouble();
    const QString unit = match.captured(3).toLower();
    if (!unit.isEmpty() && unit != QLatin1String("b")) {
      const int power = QStringLiteral("kmgt").indexOf(unit.front()) + 1;
      for (int i = 0; i < power; ++i)
        bytes *= 1024.0;
    }
    SizeQuery query;
    query.bytes = static_cast<Bytes>(std::llround(bytes));
    const QString op = match.captured(1);
    if (op == QLatin1String("<=") || op == QLatin1String("<")) {
      query.compare = SizeQuery::Compare::at_most;
      if (op == QLatin1String("<"))
        query.bytes -= 1;
    } else if (op == QLatin1String("=")) {
      query.compare = SizeQuery::Compare::equal;
    } else if (op == QLatin1String(">")) {
      query.bytes += 1;
    }
    return EventQuery{query};
  }
  return EventQuery{FrameQuery{text}};
}

std::optional<std::uint64_t> findEvent(const QString& databasePath, storage::RunId run,
                                       const EventQuery& query, std::uint64_t start, int direction,
                                       const FrameStacks* stacks, const JobContext* job) {
  auto store = openReader(databasePath);
  const std::uint64_t count = store->run(run).event_count;
  if (count == 0 || start >= count)
    return std::nullopt;
  if (direction > 0) {
    for (std::uint64_t first = start; first < count; first += kEventsPerSearchRead) {
      if (job && job->cancelled())
        return std::nullopt;
      const auto events = store->events(run, first, std::min(count, first + kEventsPerSearchRead));
      for (std::size_t i = 0; i < events.size(); ++i)
        if (matches(events[i], query, stacks))
          return first + i;
    }
    return std::nullopt;
  }
  for (std::uint64_t end = start + 1; end > 0;) {
    if (job && job->cancelled())
      return std::nullopt;
    const std::uint64_t first = end > kEventsPerSearchRead ? end - kEventsPerSearchRead : 0;
    const auto events = store->events(run, first, end);
    for (std::size_t i = events.size(); i-- > 0;)
      if (matches(events[i], query, stacks))
        return first + i;
    end = first;
  }
  return std::nullopt;
}

EventHistoryPage::EventHistoryPage(QWidget* parent)
    : QWidget(parent),
      m_model(new EventListModel(this)),
      m_view(new QTableView(this)),
      m_find(new QLineEdit(this)),
      m_status(new QLabel(this)) {
  setObjectName(QStringLiteral("eventHistoryPage"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* title = new QLabel(tr("<b>Allocator State History</b>"), this);
  layout->addWidget(title);
  auto* findRow = new QHBoxLayout;
  m_find->setPlaceholderText(tr("event #, size (> 100 MiB) or frame text"));
  m_find->setClearButtonEnabled(true);
  m_find->setObjectName(QStringLiteral("historyFind"));
  findRow->addWidget(m_find, 1);
  auto button = [this, findRow](const QString& text, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setToolTip(tip);
    b->setAutoDefault(false);
    findRow->addWidget(b);
    return b;
  };
  QPushButton* previous = button(tr("◀"), tr("Find the previous match"));
  QPushButton* next = button(tr("▶"), tr("Find the next match (Enter)"));
  layout->addLayout(findRow);
  auto* jumpRow = new QHBoxLayout;
  auto jump = [this, jumpRow](const QString& text, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setToolTip(tip);
    b->setAutoDefault(false);
    jumpRow->addWidget(b);
    return b;
  };
  QPushButton* previousOom = jump(tr("◀ OOM"), tr("The previous out-of-memory event"));
  QPushButton* nextOom = jump(tr("OOM ▶"), tr("The next out-of-memory event"));
  QPushButton* peak = jump(tr("Peak"), tr("Where allocated memory first reaches its peak"));
  jumpRow->addStretch(1);
  layout->addLayout(jumpRow);
  m_view->setModel(m_model);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setSelectionMode(QAbstractItemView::SingleSelection);
  m_view->verticalHeader()->hide();
  m_view->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 4);
  m_view->horizontalHeader()->setStretchLastSection(true);
  m_view->setWordWrap(false);
  layout->addWidget(m_view, 1);
  m_status->setWordWrap(true);
  layout->addWidget(m_status);

  connect(m_find, &QLineEdit::returnPressed, this, [this] { find(+1); });
  connect(next, &QPushButton::clicked, this, [this] { find(+1); });
  connect(previous, &QPushButton::clicked, this, [this] { find(-1); });
  connect(nextOom, &QPushButton::clicked, this, [this] { this->nextOom(+1); });
  connect(previousOom, &QPushButton::clicked, this, [this] { this->nextOom(-1); });
  connect(peak, &QPushButton::clicked, this, &EventHistoryPage::goToPeak);
  connect(m_view, &QTableView::clicked, this,
          [this](const QModelIndex& index) { goToEvent(static_cast<std::uint64_t>(index.row())); });
}

void EventHistoryPage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  clear();
}

void EventHistoryPage::clear() {
  m_findJob.cancel();
  m_stacksJob.cancel();
  m_run.reset();
  m_model->clear();
  m_oomEvents.clear();
  m_stacks.reset();
  m_status->clear();
}

void EventHistoryPage::setRun(storage::RunId run, std::uint64_t eventCount,
                              std::vector<std::uint64_t> oomEvents, std::uint64_t peakCursor) {
  m_findJob.cancel();
  m_run = run;
  m_eventCount = eventCount;
  m_oomEvents = std::move(oomEvents);
  m_peakCursor = peakCursor;
  m_model->setRun(m_databasePath, run, eventCount, m_stacks);
  followCursor();
  // Widths for the widest value of each column, not for the rows on screen at the start (the
  // view opens at the run's cursor, far down a long run).
  const QFontMetrics metrics(m_view->font());
  const auto widthOf = [&metrics](const QString& text) {
    return metrics.horizontalAdvance(text) + 2 * metrics.averageCharWidth() + 6;
  };
  m_view->setColumnWidth(EventListModel::EventColumn,
                         widthOf(QString::number(std::max<std::uint64_t>(eventCount, 10))));
  m_view->setColumnWidth(EventListModel::ActionColumn, widthOf(QStringLiteral("free_completed")));
  m_view->setColumnWidth(EventListModel::SizeColumn, widthOf(QStringLiteral("999.9 MiB")));
  m_view->setColumnWidth(EventListModel::AddressColumn, widthOf(QStringLiteral("0x7fb62a160000")));
  m_view->setColumnWidth(EventListModel::StreamColumn, widthOf(QStringLiteral("Stream")));
  m_view->setColumnWidth(EventListModel::TimeColumn, widthOf(QStringLiteral("99999.9 ms")));
  m_status->setText(tr("%1 events · %n OOM(s)", nullptr, static_cast<int>(m_oomEvents.size()))
                        .arg(formatCount(eventCount)));
  const QString path = m_databasePath;
  m_stacksJob.start(
      [path, run](const JobContext&) {
        return std::make_shared<const FrameStacks>(loadFrameStacks(*openReader(path), run));
      },
      [this](std::shared_ptr<const FrameStacks> stacks) { setStacks(std::move(stacks)); },
      [this](const QString& message) { m_status->setText(message); });
}

void EventHistoryPage::setStacks(std::shared_ptr<const FrameStacks> stacks) {
  m_stacks = std::move(stacks);
  if (m_run)
    m_model->setRun(m_databasePath, *m_run, m_eventCount, m_stacks);
  followCursor();
}

void EventHistoryPage::selectRow(std::uint64_t index) {
  if (index >= m_eventCount)
    return;
  m_following = true;
  const QModelIndex row = m_model->index(static_cast<int>(index), 0);
  m_view->selectionModel()->setCurrentIndex(
      row, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  m_view->scrollTo(row, QAbstractItemView::PositionAtCenter);
  m_following = false;
}

void EventHistoryPage::goToEvent(std::uint64_t index) {
  if (!m_run || m_eventCount == 0)
    return;
  index = std::min(index, m_eventCount - 1);
  selectRow(index);
  // After the event, except an OOM: the state it failed in, which the map then explains.
  const auto event = m_model->event(index);
  m_cursor = event && event->action == TraceAction::oom ? index : index + 1;
  emit cursorEventChanged(m_cursor);
}

void EventHistoryPage::setCursorEvent(std::uint64_t cursor) {
  if (m_following || (cursor == m_cursor && m_view->currentIndex().isValid()))
    return;
  m_cursor = cursor;
  followCursor();
}

void EventHistoryPage::followCursor() {
  // The event just applied; at an OOM's cursor the OOM itself (the map explains it).
  const auto next = m_model->event(m_cursor);
  selectRow(next && next->action == TraceAction::oom ? m_cursor
                                                     : (m_cursor > 0 ? m_cursor - 1 : 0));
}

void EventHistoryPage::nextOom(int direction) {
  if (m_oomEvents.empty()) {
    m_status->setText(tr("This run has no OOM."));
    return;
  }
  const auto current = static_cast<std::uint64_t>(std::max(0, m_view->currentIndex().row()));
  std::optional<std::uint64_t> target;
  if (direction > 0) {
    const auto it = std::upper_bound(m_oomEvents.begin(), m_oomEvents.end(), current);
    target = it != m_oomEvents.end() ? *it : m_oomEvents.front();
  } else {
    const auto it = std::lower_bound(m_oomEvents.begin(), m_oomEvents.end(), current);
    target = it != m_oomEvents.begin() ? *std::prev(it) : m_oomEvents.back();
  }
  const auto position = std::lower_bound(m_oomEvents.begin(), m_oomEvents.end(), *target);
  m_status->setText(tr("OOM %1 of %2 (event %3)")
                        .arg(position - m_oomEvents.begin() + 1)
                        .arg(m_oomEvents.size())
                        .arg(formatCount(*target)));
  goToEvent(*target);
}

void EventHistoryPage::goToPeak() {
  if (!m_run)
    return;
  m_status->setText(tr("Peak allocated memory: after event %1")
                        .arg(formatCount(m_peakCursor > 0 ? m_peakCursor - 1 : 0)));
  goToEvent(m_peakCursor > 0 ? m_peakCursor - 1 : 0);
}

void EventHistoryPage::find(int direction) {
  const auto query = parseEventQuery(m_find->text());
  if (!m_run || !query)
    return;
  if (const auto* index = std::get_if<std::uint64_t>(&*query)) {
    if (*index >= m_eventCount) {
      m_status->setText(tr("The run has %1 events (0 to %2).")
                            .arg(formatCount(m_eventCount))
                            .arg(formatCount(m_eventCount > 0 ? m_eventCount - 1 : 0)));
      return;
    }
    m_status->setText(tr("Event %1").arg(formatCount(*index)));
    goToEvent(*index);
    return;
  }
  const auto current = static_cast<std::int64_t>(m_view->currentIndex().row());
  const std::int64_t start = current + direction;
  if (start < 0 || static_cast<std::uint64_t>(start) >= m_eventCount) {
    m_status->setText(tr("No more matches in this direction."));
    return;
  }
  m_status->setText(tr("Searching…"));
  const QString path = m_databasePath;
  const storage::RunId run = *m_run;
  auto stacks = m_stacks;
  const EventQuery what = *query;
  m_findJob.start(
      [path, run, what, start, direction, stacks](const JobContext& job) {
        return findEvent(path, run, what, static_cast<std::uint64_t>(start), direction,
                         stacks.get(), &job);
      },
      [this](std::optional<std::uint64_t> found) {
        if (!found) {
          m_status->setText(tr("No match %1.").arg(tr("in this direction")));
          return;
        }
        m_status->setText(tr("Match at event %1").arg(formatCount(*found)));
        goToEvent(*found);
      },
      [this](const QString& message) { m_status->setText(message); });
}

}  // namespace fragscope::gui
