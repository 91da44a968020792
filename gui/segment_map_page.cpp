#include "gui/segment_map_page.h"

#include <QKeyEvent>
#include <QPainter>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "gui/format.h"
#include "gui/pool_overview.h"

namespace fragscope::gui {

namespace {
constexpr double kOomBannerHeight = 64;

QColor streamStripe(StreamId stream) {
  // The default stream gets no stripe; others a stable hue each.
  if (stream.value == 0)
    return {};
  return QColor::fromHsv(static_cast<int>((stream.value * 67) % 360), 160, 200);
}

QColor privatePoolOutline() {
  return QColor(0x8e, 0x44, 0xad);
}
}  // namespace

FrameStacks loadFrameStacks(storage::RunStore& store, storage::RunId run) {
  FrameStacks stacks;
  stacks.frames = store.frame_stacks(run);
  stacks.simulated = store.run(run).source == storage::RunSource::simulated;
  return stacks;
}

const std::vector<Frame>* stackOf(const FrameStacks* stacks, FrameStackId id) {
  if (!stacks || id.value == 0 || id.value > stacks->frames.size())
    return nullptr;
  return &stacks->frames[id.value - 1];
}

QString shortSourcePath(const std::string& path) {
  // What a reader recognises: the package path of installed code (torch/nn/modules/module.py),
  // else the path as recorded.
  const QString full = QString::fromStdString(path);
  for (const QLatin1String marker :
       {QLatin1String("/site-packages/"), QLatin1String("/dist-packages/"),
        QLatin1String("/lib/python")}) {
    const qsizetype at = full.lastIndexOf(marker);
    if (at >= 0)
      return full.mid(at + marker.size());
  }
  return full;
}

QString stackHtml(const std::vector<Frame>& frames, std::size_t maxFrames) {
  const std::size_t shown = maxFrames == 0 ? frames.size() : std::min(frames.size(), maxFrames);
  // One frame per row, its function above its place, so a narrow panel wraps nothing.
  QString html = QStringLiteral("<table cellspacing=0 cellpadding=1>");
  for (std::size_t i = 0; i < shown; ++i) {
    const Frame& frame = frames[i];
    html += QStringLiteral(
                "<tr><td><tt>%1</tt><br>&nbsp;&nbsp;<span style='color:gray'>%2:%3</span>"
                "</td></tr>")
                .arg(QString::fromStdString(frame.name).toHtmlEscaped(),
                     shortSourcePath(frame.filename).toHtmlEscaped())
                .arg(frame.line);
  }
  html += QStringLiteral("</table>");
  if (shown < frames.size())
    html +=
        QObject::tr("<i>… %n more frame(s)</i>", nullptr, static_cast<int>(frames.size() - shown));
  return html;
}

QString blockStackHtml(const FrameStacks* stacks, FrameStackId id, std::size_t maxFrames) {
  if (id.value == 0 && stacks && stacks->simulated)
    // Recording with stacks="all" cannot help here: no Python code ran.
    return QObject::tr(
        "<i>No stack: this run was computed by FragScope's allocator model (a simulated "
        "experiment or a what-if replay), which runs no Python code, so there are no frames to "
        "record. A simulated experiment labels its allocations instead: colour the Active "
        "Memory page by category.</i>");
  if (id.value == 0 && stacks && !stacks->empty())
    // The run has stacks, this block none: stacks="python" records Python frames only, and
    // allocations made off the Python thread (autograd's backward engine) have none.
    return QObject::tr(
        "<i>No stack was recorded for this block: it was allocated outside Python code (e.g. by "
        "autograd's backward thread), and <tt>stacks=\"python\"</tt> records Python frames "
        "only. <tt>torch.cuda.memory._record_memory_history(stacks=\"all\")</tt> also records "
        "C++ frames.</i>");
  if (id.value == 0)
    return QObject::tr(
        "<i>No stack was recorded for this block (record the snapshot with "
        "<tt>torch.cuda.memory._record_memory_history(stacks=\"all\")</tt>).</i>");
  if (!stacks)
    return QObject::tr("<i>Loading stacks…</i>");
  const auto* frames = stackOf(stacks, id);
  if (!frames || frames->empty())
    return QObject::tr("<i>The stack of this block is empty.</i>");
  return QObject::tr("<b>Allocated at</b> (innermost first):") + stackHtml(*frames, maxFrames);
}

QString pieceLegendHtml() {
  QString legend;
  for (PieceKind kind : {PieceKind::allocated, PieceKind::pendingFree,
                         PieceKind::freeInSplitSegment, PieceKind::freeWholeSegment})
    legend += QStringLiteral(
                  "<span style=\"background-color:%1\">&nbsp;&nbsp;&nbsp;&nbsp;</span>&nbsp;%2"
                  "&nbsp;&nbsp;&nbsp;")
                  .arg(pieceColor(kind).name(), QString::fromLatin1(pieceKindName(kind)));
  return legend;
}

QColor pieceColor(PieceKind kind) {
  switch (kind) {
    case PieceKind::allocated:
      return colors::blockAllocated;
    case PieceKind::pendingFree:
      return colors::blockPendingFree;
    case PieceKind::freeInSplitSegment:
      return colors::freeInSplitSegment;
    case PieceKind::freeWholeSegment:
      return colors::freeWholeSegment;
  }
  return Qt::black;
}

QString describeEvent(const TraceEvent& event, std::optional<Bytes> limit) {
  const QString action = QString::fromLatin1(to_string(event.action));
  if (event.action == TraceAction::oom && limit)
    return QObject::tr("OOM: request of %1 failed under the per-process limit of %2 allowed")
        .arg(formatBytes(static_cast<double>(event.size)),
             formatBytes(static_cast<double>(*limit)));
  if (event.action == TraceAction::oom)
    return QObject::tr("OOM: request of %1 failed with %2 free on the device")
        .arg(formatBytes(static_cast<double>(event.size)),
             formatBytes(static_cast<double>(event.addr)));
  return QObject::tr("%1 %2 at 0x%3 (stream %4)")
      .arg(action, formatBytes(static_cast<double>(event.size)))
      .arg(event.addr, 0, 16)
      .arg(event.stream.value);
}

SegmentMapWidget::SegmentMapWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
  setMinimumSize(300, 160);
}

void SegmentMapWidget::setSnapshot(const SegmentSnapshotAt& snapshot) {
  m_views = snapshot.views;
  m_segmentPools = snapshot.segmentPools;
  m_largestFree = snapshot.summary.largestFree;
  m_oom.reset();
  if (snapshot.nextEvent && snapshot.nextEvent->action == TraceAction::oom)
    m_oom = snapshot.nextEvent;
  findSelection();
  relayout();
}

void SegmentMapWidget::clear() {
  m_views.clear();
  m_segmentPools.clear();
  m_oom.reset();
  m_oomVerdict.clear();
  m_selected.reset();
  m_selectedAddr.reset();
  m_stacks.reset();
  relayout();
}

void SegmentMapWidget::selectAddress(std::uint64_t addr) {
  m_selectLargest = addr == 0;
  m_selectedAddr = addr;
  findSelection();
  update();
  emit selectionChanged();
}

void SegmentMapWidget::findSelection() {
  m_selected.reset();
  if (m_selectLargest && !m_views.empty()) {
    // The largest block whose stack was recorded (the point of selecting one is to see where it
    // was allocated), else the largest.
    std::pair<bool, Bytes> best{false, 0};
    for (const SegmentView& view : m_views)
      for (const Piece& piece : view.pieces)
        if (const std::pair<bool, Bytes> rank{piece.frames.value != 0, piece.size};
            piece.kind == PieceKind::allocated && rank > best) {
          best = rank;
          m_selectedAddr = piece.addr;
        }
    m_selectLargest = false;
  }
  if (!m_selectedAddr)
    return;
  for (std::size_t s = 0; s < m_views.size(); ++s)
    for (std::size_t p = 0; p < m_views[s].pieces.size(); ++p) {
      const Piece& piece = m_views[s].pieces[p];
      if (piece.addr == *m_selectedAddr &&
          (piece.kind == PieceKind::allocated || piece.kind == PieceKind::pendingFree)) {
        m_selected = {s, p};
        return;
      }
    }
}

const Piece* SegmentMapWidget::selectedPiece(const SegmentView** segment) const {
  if (!m_selected)
    return nullptr;
  if (segment)
    *segment = &m_views[m_selected->first];
  return &m_views[m_selected->first].pieces[m_selected->second];
}

void SegmentMapWidget::selectAt(const QPointF& position) {
  const QPointF local = position - mapArea().topLeft();
  m_selected.reset();
  m_selectedAddr.reset();
  for (const PlacedPiece& placed : m_layout.placed)
    if (placed.rect.contains(local)) {
      m_selected = {placed.segment, placed.piece};
      m_selectedAddr = m_views[placed.segment].pieces[placed.piece].addr;
      break;
    }
  update();
  emit selectionChanged();
}

void SegmentMapWidget::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton)
    selectAt(event->position());
  QWidget::mousePressEvent(event);
}

QString SegmentMapWidget::oomBannerTitle() const {
  if (m_oomVerdict == QLatin1String("capacity"))
    return tr(
        "Out of memory at the next event: a capacity OOM — the live allocations plus the "
        "request exceed what the allocator may hold; no packing would fit it");
  if (m_oomVerdict == QLatin1String("fragmentation"))
    return tr(
        "Out of memory at the next event: fragmentation — enough is free in total, but no "
        "free block is large enough");
  if (m_oomVerdict == QLatin1String("cache_policy"))
    return tr(
        "Out of memory at the next event: cache policy — a cached block was large enough "
        "but the allocator's rules refused it");
  if (m_oomVerdict == QLatin1String("other_stream"))
    return tr("Out of memory at the next event: the free memory belongs to other streams");
  if (m_oomVerdict == QLatin1String("private_pool"))
    return tr(
        "Out of memory at the next event: the free memory is stranded in private pools (CUDA "
        "graphs, MemPool), which only their own allocations can use");
  return tr("Out of memory at the next event: the request against the largest free block");
}

QRectF SegmentMapWidget::mapArea() const {
  QRectF area = QRectF(rect()).adjusted(4, 4, -4, -4);
  if (m_oom)
    area.setTop(area.top() + kOomBannerHeight + 8);
  return area;
}

void SegmentMapWidget::relayout() {
  const QRectF area = mapArea();
  m_layout = layoutSegments(m_views, area.size());
  update();
}

void SegmentMapWidget::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  relayout();
}

const Piece* SegmentMapWidget::pieceAt(const QPointF& position, const SegmentView** segment) const {
  const QPointF local = position - mapArea().topLeft();
  for (const PlacedPiece& placed : m_layout.placed) {
    if (placed.rect.contains(local)) {
      if (segment)
        *segment = &m_views[placed.segment];
      return &m_views[placed.segment].pieces[placed.piece];
    }
  }
  return nullptr;
}

void SegmentMapWidget::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.fillRect(rect(), palette().color(QPalette::Base));
  const QColor text = palette().color(QPalette::Text);
  if (m_views.empty()) {
    painter.setPen(text);
    painter.drawText(rect(), Qt::AlignCenter, tr("No segments at this event."));
    return;
  }
  if (m_oom) {
    // The failed request against the largest free block, on one byte scale.
    const QRectF banner = QRectF(rect()).adjusted(4, 4, -4, 0);
    const double width = banner.width() - 180;
    const double scale =
        width / static_cast<double>(std::max<Bytes>({m_oom->size, m_largestFree, 1}));
    painter.setPen(text);
    QFont bold = font();
    bold.setBold(true);
    painter.setFont(bold);
    painter.drawText(QRectF(banner.left(), banner.top(), banner.width(), 18), Qt::AlignLeft,
                     oomBannerTitle());
    painter.setFont(font());
    const QRectF requestBar(banner.left() + 170, banner.top() + 22,
                            std::max(2.0, static_cast<double>(m_oom->size) * scale), 16);
    const QRectF freeBar(banner.left() + 170, banner.top() + 44,
                         std::max(2.0, static_cast<double>(m_largestFree) * scale), 16);
    painter.fillRect(requestBar, colors::oom);
    painter.fillRect(freeBar, colors::freeInSplitSegment.lighter(110));
    painter.drawText(QRectF(banner.left(), requestBar.top(), 165, 16), Qt::AlignLeft,
                     tr("request %1").arg(formatBytes(static_cast<double>(m_oom->size))));
    painter.drawText(QRectF(banner.left(), freeBar.top(), 165, 16), Qt::AlignLeft,
                     tr("largest free %1").arg(formatBytes(static_cast<double>(m_largestFree))));
  }
  const QPointF origin = mapArea().topLeft();
  painter.translate(origin);
  for (const PlacedPiece& placed : m_layout.placed) {
    const Piece& piece = m_views[placed.segment].pieces[placed.piece];
    painter.fillRect(placed.rect, pieceColor(piece.kind));
  }
  // The selected block: a thick outline in the text colour.
  if (m_selected) {
    painter.setPen(QPen(text, 2));
    painter.setBrush(Qt::NoBrush);
    for (const PlacedPiece& placed : m_layout.placed)
      if (placed.segment == m_selected->first && placed.piece == m_selected->second)
        painter.drawRect(placed.rect.adjusted(1, 1, -1, -1));
  }
  // Block boundaries: a thin line in the background colour where wide enough to see.
  painter.setPen(QPen(palette().color(QPalette::Base), 1));
  for (const PlacedPiece& placed : m_layout.placed)
    if (placed.rect.width() >= 4)
      painter.drawLine(placed.rect.topRight(), placed.rect.bottomRight());
  // Segment outlines: solid for the large pool, dotted for small, dashed for expandable; a
  // stripe at the bottom for a non-default stream.
  for (const SegmentLayout::Outline& outline : m_layout.segmentOutlines) {
    const SegmentView& view = m_views[outline.segment];
    const Qt::PenStyle style = view.pool == SegmentKind::small        ? Qt::DotLine
                               : view.pool == SegmentKind::expandable ? Qt::DashLine
                                                                      : Qt::SolidLine;
    // A private pool's segment (CUDA graph, MemPool) in its own colour: its free memory serves
    // only that pool's allocations.
    const bool privatePool =
        outline.segment < m_segmentPools.size() && !m_segmentPools[outline.segment].is_default();
    painter.setPen(privatePool ? QPen(privatePoolOutline(), 2, style) : QPen(text, 1, style));
    painter.setBrush(Qt::NoBrush);
    painter.drawRect(outline.rect.adjusted(0, 0, -0.5, -0.5));
    const QColor stripe = streamStripe(view.segment.stream);
    if (stripe.isValid())
      painter.fillRect(
          QRectF(outline.rect.left(), outline.rect.bottom() - 3, outline.rect.width(), 3), stripe);
  }
}

QString SegmentMapWidget::describePiece(const Piece& piece, const SegmentView& segment) const {
  QString text =
      tr("<b>%1</b> %2<br>at 0x%3<br>segment 0x%4: %5, %6, stream %7<br>segment live %8, "
         "largest free %9")
          .arg(QString::fromLatin1(pieceKindName(piece.kind)),
               formatBytes(static_cast<double>(piece.size)))
          .arg(piece.addr, 0, 16)
          .arg(segment.segment.base, 0, 16)
          .arg(formatBytes(static_cast<double>(segment.segment.size)),
               QString::fromLatin1(segmentKindName(segment.pool)))
          .arg(segment.segment.stream.value)
          .arg(formatBytes(static_cast<double>(segment.liveBytes)),
               formatBytes(static_cast<double>(segment.largestFree)));
  const auto index = static_cast<std::size_t>(&segment - m_views.data());
  if (index < m_segmentPools.size() && !m_segmentPools[index].is_default())
    text += tr("<br>%1: its free memory serves only this pool's allocations")
                .arg(segmentPoolText(m_segmentPools[index]).toHtmlEscaped());
  if (piece.kind == PieceKind::allocated || piece.kind == PieceKind::pendingFree)
    text += tr("<br><i>size is the request size (traces do not record rounding)</i>");
  return text;
}

void SegmentMapWidget::mouseMoveEvent(QMouseEvent* event) {
  const SegmentView* segment = nullptr;
  const Piece* piece = pieceAt(event->position(), &segment);
  if (!piece) {
    QToolTip::hideText();
    return;
  }
  QString text = describePiece(*piece, *segment);
  // Where was this allocated: the first question at every OOM.
  if (piece->kind == PieceKind::allocated || piece->kind == PieceKind::pendingFree)
    text += QStringLiteral("<hr>") + blockStackHtml(m_stacks.get(), piece->frames, 12) +
            tr("<br><i>Click to keep it in the frames panel.</i>");
  QToolTip::showText(event->globalPosition().toPoint(), text, this);
}

void SegmentMapWidget::keyPressEvent(QKeyEvent* event) {
  switch (event->key()) {
    case Qt::Key_Left:
      emit stepRequested(-1);
      return;
    case Qt::Key_Right:
      emit stepRequested(1);
      return;
    case Qt::Key_PageUp:
      emit stepRequested(-100);
      return;
    case Qt::Key_PageDown:
      emit stepRequested(100);
      return;
    case Qt::Key_Home:
      emit jumpRequested(false);
      return;
    case Qt::Key_End:
      emit jumpRequested(true);
      return;
    default:
      QWidget::keyPressEvent(event);
  }
}

SegmentMapPage::SegmentMapPage(QWidget* parent)
    : QWidget(parent),
      m_header(new QLabel(this)),
      m_legend(new QLabel(this)),
      m_map(new SegmentMapWidget(this)),
      m_frames(new QTextBrowser(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  m_header->setTextFormat(Qt::RichText);
  m_header->setWordWrap(true);
  layout->addWidget(m_header);
  QString legend = pieceLegendHtml();
  legend +=
      tr("&nbsp;│&nbsp; outline: solid = large pool, dotted = small pool (2 MiB), dashed = "
         "expandable; coloured stripe = non-default stream; <span style='color:%1'>thick violet "
         "outline</span> = private pool (CUDA graph, MemPool) &nbsp;│&nbsp; ←/→ step events")
          .arg(privatePoolOutline().name());
  m_legend->setTextFormat(Qt::RichText);
  m_legend->setWordWrap(true);
  m_legend->setText(legend);
  layout->addWidget(m_legend);
  m_frames->setObjectName(QStringLiteral("framesPanel"));
  m_frames->setOpenLinks(false);
  m_frames->setMinimumWidth(220);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(m_map);
  split->addWidget(m_frames);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setSizes({900, 300});
  layout->addWidget(split, 1);
  connect(m_map, &SegmentMapWidget::selectionChanged, this, &SegmentMapPage::updateFramesPanel);
  connect(m_map, &SegmentMapWidget::stepRequested, this, &SegmentMapPage::step);
  connect(m_map, &SegmentMapWidget::jumpRequested, this, &SegmentMapPage::jumpToEnd);
  clear();
}

void SegmentMapPage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
  clear();
}

void SegmentMapPage::clear() {
  m_job.cancel();
  m_run.reset();
  m_snapshot.reset();
  m_eventCount = 0;
  m_eventIndex = 0;
  m_stackJob.cancel();
  m_pendingSelection.reset();
  m_oomCauses.clear();
  m_limit.reset();
  m_map->clear();
  m_header->setText(tr("<i>Select a run, then click the timeline to choose an event.</i>"));
  updateFramesPanel();
}

void SegmentMapPage::setRun(storage::RunId run, std::uint64_t eventCount) {
  clear();
  m_run = run;
  m_eventCount = eventCount;
  // Every stack of the run, once: hover and the frames panel look them up by id.
  const QString path = m_databasePath;
  m_stackJob.start(
      [path, run](const JobContext&) {
        auto store = openReader(path);
        return std::make_shared<const FrameStacks>(loadFrameStacks(*store, run));
      },
      [this](std::shared_ptr<const FrameStacks> stacks) {
        m_map->setStacks(std::move(stacks));
        updateFramesPanel();
      });
}

void SegmentMapPage::setOomCauses(std::map<std::uint64_t, std::string> causes) {
  m_oomCauses = std::move(causes);
  if (m_snapshot) {
    const auto cause = m_oomCauses.find(m_snapshot->eventIndex);
    m_map->setOomVerdict(cause == m_oomCauses.end() ? QString()
                                                    : QString::fromStdString(cause->second));
  }
}

void SegmentMapPage::updateFramesPanel() {
  const SegmentView* segment = nullptr;
  const Piece* piece = m_map->selectedPiece(&segment);
  if (!piece) {
    m_frames->setHtml(
        tr("<p><b>Frames</b></p><p><i>Click a block in the map to see where it was "
           "allocated.</i></p>"));
    return;
  }
  QString html = m_map->describePiece(*piece, *segment);
  if (piece->kind == PieceKind::allocated || piece->kind == PieceKind::pendingFree)
    html += QStringLiteral("<hr>") + blockStackHtml(m_map->stacks(), piece->frames, 0);
  m_frames->setHtml(html);
}

void SegmentMapPage::jumpToEnd(bool toEnd) {
  if (!m_run)
    return;
  setEvent(toEnd ? m_eventCount : 0);
  emit eventChanged(m_eventIndex);
}

void SegmentMapPage::step(std::int64_t delta) {
  if (!m_run)
    return;
  const std::int64_t target = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(m_eventIndex) + delta, 0, static_cast<std::int64_t>(m_eventCount));
  setEvent(static_cast<std::uint64_t>(target));
  emit eventChanged(m_eventIndex);
}

void SegmentMapPage::setEvent(std::uint64_t eventIndex) {
  if (!m_run)
    return;
  m_eventIndex = std::min(eventIndex, m_eventCount);
  const QString path = m_databasePath;
  const storage::RunId run = *m_run;
  const std::uint64_t index = m_eventIndex;
  m_job.start(
      [path, run, index](const JobContext&) { return loadSegmentSnapshot(path, run, index); },
      [this](SegmentSnapshotAt snapshot) { showSnapshot(std::move(snapshot)); },
      [this](const QString& message) {
        m_header->setText(
            tr("<b>Could not load the segment state:</b> %1").arg(message.toHtmlEscaped()));
      });
}

void SegmentMapPage::selectBlock(std::uint64_t addr) {
  if (m_job.busy()) {
    m_pendingSelection = addr;  // in the state being loaded, not the one on screen
    return;
  }
  m_map->selectAddress(addr);
}

void SegmentMapPage::showSnapshot(SegmentSnapshotAt snapshot) {
  m_snapshot = std::move(snapshot);
  m_map->setSnapshot(*m_snapshot);
  if (m_pendingSelection && !m_job.busy()) {
    m_map->selectAddress(*m_pendingSelection);
    m_pendingSelection.reset();
  }
  const auto cause = m_oomCauses.find(m_snapshot->eventIndex);
  m_map->setOomVerdict(cause == m_oomCauses.end() ? QString()
                                                  : QString::fromStdString(cause->second));
  updateFramesPanel();
  const SegmentMapSummary& summary = m_snapshot->summary;
  QString header =
      tr("<b>After event %1 of %2</b> &nbsp;·&nbsp; %3 segments, %4 blocks &nbsp;·&nbsp; "
         "reserved %5, live %6, free in split segments %7, free whole segments %8, largest free "
         "%9 &nbsp;·&nbsp; external fragmentation %10%")
          .arg(formatCount(m_snapshot->eventIndex), formatCount(m_snapshot->eventCount))
          .arg(summary.segments + summary.expandableRanges)
          .arg(summary.blocks)
          .arg(formatBytes(static_cast<double>(summary.reserved)),
               formatBytes(static_cast<double>(summary.live)),
               formatBytes(static_cast<double>(summary.freeInSplit + summary.freeExpandable)),
               formatBytes(static_cast<double>(summary.freeWhole)),
               formatBytes(static_cast<double>(summary.largestFree)))
          .arg(summary.externalFragmentation * 100, 0, 'f', 1);
  if (const QString pools = poolOverviewText(m_snapshot->pools); !pools.isEmpty())
    header += QStringLiteral("<br>") +
              pools.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>"));
  if (m_snapshot->nextEvent)
    header +=
        QStringLiteral("<br>") +
        tr("Next event: %1").arg(describeEvent(*m_snapshot->nextEvent, m_limit).toHtmlEscaped());
  if (m_snapshot->state.unmatched_events() > 0)
    header += QStringLiteral("<br><i>") +
              tr("%1 events referred to blocks from before the trace began and were skipped.")
                  .arg(m_snapshot->state.unmatched_events()) +
              QStringLiteral("</i>");
  m_header->setText(header);
  emit snapshotReady(*m_snapshot);
}

}  // namespace fragscope::gui
