#pragma once
// The timeline's zoom history (hotspot's FilterAndZoomStack idea): one object owns the visible
// event range and its back/forward stacks, exposes ready-made actions, and says when the range
// changes. Pages never keep their own copy of the zoom.
#include <QAction>
#include <QObject>
#include <cstdint>
#include <vector>

namespace fragscope::gui {

struct EventRange {
  std::uint64_t first = 0;
  std::uint64_t end = 0;  // exclusive
  std::uint64_t size() const { return end > first ? end - first : 0; }
  friend bool operator==(const EventRange&, const EventRange&) = default;
};

class ZoomStack : public QObject {
  Q_OBJECT
 public:
  explicit ZoomStack(QObject* parent = nullptr);

  // A new run: the whole range, history cleared.
  void reset(EventRange whole);
  // Zooms to `range` (clamped to the whole run, at least one event), remembering the old one.
  void zoomTo(EventRange range);
  // Like zoomTo, but merges with the last step (a wheel or drag gesture is one history entry
  // per pause, not per pixel).
  void zoomContinuous(EventRange range);
  void endGesture() { m_inGesture = false; }
  void back();
  void forward();
  void zoomOut();  // back to the whole run

  EventRange current() const { return m_current; }
  EventRange whole() const { return m_whole; }
  bool canGoBack() const { return !m_back.empty(); }
  bool canGoForward() const { return !m_forward.empty(); }

  QAction* backAction() const { return m_backAction; }
  QAction* forwardAction() const { return m_forwardAction; }
  QAction* zoomOutAction() const { return m_zoomOutAction; }

 signals:
  void zoomChanged(fragscope::gui::EventRange range);

 private:
  EventRange clamp(EventRange range) const;
  void apply(EventRange range);
  void updateActions();

  EventRange m_whole;
  EventRange m_current;
  std::vector<EventRange> m_back;
  std::vector<EventRange> m_forward;
  bool m_inGesture = false;
  QAction* m_backAction;
  QAction* m_forwardAction;
  QAction* m_zoomOutAction;
};

}  // namespace fragscope::gui
