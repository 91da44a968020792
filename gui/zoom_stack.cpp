#include "gui/zoom_stack.h"

#include <QIcon>
#include <algorithm>

namespace fragscope::gui {

ZoomStack::ZoomStack(QObject* parent)
    : QObject(parent),
      m_backAction(
          new QAction(QIcon::fromTheme(QStringLiteral("go-previous")), tr("Zoom &Back"), this)),
      m_forwardAction(
          new QAction(QIcon::fromTheme(QStringLiteral("go-next")), tr("Zoom &Forward"), this)),
      m_zoomOutAction(new QAction(QIcon::fromTheme(QStringLiteral("zoom-original")),
                                  tr("Zoom to &Whole Run"), this)) {
  m_backAction->setShortcut(QKeySequence::Back);
  m_forwardAction->setShortcut(QKeySequence::Forward);
  m_zoomOutAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
  connect(m_backAction, &QAction::triggered, this, &ZoomStack::back);
  connect(m_forwardAction, &QAction::triggered, this, &ZoomStack::forward);
  connect(m_zoomOutAction, &QAction::triggered, this, &ZoomStack::zoomOut);
  updateActions();
}

void ZoomStack::reset(EventRange whole) {
  m_whole = whole;
  m_back.clear();
  m_forward.clear();
  m_inGesture = false;
  apply(whole);
}

EventRange ZoomStack::clamp(EventRange range) const {
  range.first = std::clamp(range.first, m_whole.first, m_whole.end);
  range.end = std::clamp(range.end, m_whole.first, m_whole.end);
  if (range.end <= range.first) {
    range.end = std::min(m_whole.end, range.first + 1);
    range.first = range.end > 0 ? std::min(range.first, range.end - 1) : 0;
  }
  return range;
}

void ZoomStack::zoomTo(EventRange range) {
  range = clamp(range);
  m_inGesture = false;
  if (range == m_current)
    return;
  m_back.push_back(m_current);
  m_forward.clear();
  apply(range);
}

void ZoomStack::zoomContinuous(EventRange range) {
  range = clamp(range);
  if (range == m_current)
    return;
  if (!m_inGesture) {
    m_back.push_back(m_current);
    m_forward.clear();
    m_inGesture = true;
  }
  apply(range);
}

void ZoomStack::back() {
  if (m_back.empty())
    return;
  m_inGesture = false;
  m_forward.push_back(m_current);
  const EventRange previous = m_back.back();
  m_back.pop_back();
  apply(previous);
}

void ZoomStack::forward() {
  if (m_forward.empty())
    return;
  m_inGesture = false;
  m_back.push_back(m_current);
  const EventRange next = m_forward.back();
  m_forward.pop_back();
  apply(next);
}

void ZoomStack::zoomOut() {
  zoomTo(m_whole);
}

void ZoomStack::apply(EventRange range) {
  m_current = range;
  updateActions();
  emit zoomChanged(range);
}

void ZoomStack::updateActions() {
  m_backAction->setEnabled(canGoBack());
  m_forwardAction->setEnabled(canGoForward());
  m_zoomOutAction->setEnabled(m_current != m_whole);
}

}  // namespace fragscope::gui
