// A 1.2M-event run (the size) loads, zooms and moves its cursor with the event loop
// running; the longest GUI-thread event is printed (its 100 ms target is fragscope-gui-bench's
// BM_LongestGuiThreadEvent). Two measures: the longest single event delivery on the GUI thread
// (timed in QApplication::notify, naming the culprit when it fails) and the longest gap between the
// ticks of a 5 ms timer (which also counts time the thread was merely descheduled on a busy
// machine).
#include <time.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTest>
#include <QThread>
#include <QTimer>

#include "gui/application.h"
#include "gui/main_window.h"
#include "gui/segment_map_page.h"
#include "gui/timeline_page.h"
#include "gui_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

class StallMeter {
 public:
  StallMeter() {
    m_clock.start();
    m_last = 0;
    QObject::connect(&m_timer, &QTimer::timeout, [this] {
      const qint64 now = m_clock.elapsed();
      m_maxGap = std::max(m_maxGap, now - m_last);
      m_last = now;
    });
    m_timer.start(5);
  }
  qint64 maxGapMs() const { return m_maxGap; }

 private:
  QTimer m_timer;
  QElapsedTimer m_clock;
  qint64 m_last = 0;
  qint64 m_maxGap = 0;
};

// Times every event the GUI thread delivers; nested deliveries are counted in their parent.
class TimingApplication : public QApplication {
 public:
  using QApplication::QApplication;
  bool notify(QObject* receiver, QEvent* event) override {
    if (m_depth++ > 0 || QThread::currentThread() != thread()) {
      const bool handled = QApplication::notify(receiver, event);
      --m_depth;
      return handled;
    }
    QElapsedTimer timer;
    timer.start();
    const double cpuStart = threadCpuMs();
    const int type = event->type();
    const QString what = QString::fromLatin1(receiver->metaObject()->className());
    const bool handled = QApplication::notify(receiver, event);
    const qint64 elapsed = timer.elapsed();
    const double cpu = threadCpuMs() - cpuStart;
    --m_depth;
    if (measuring && cpu > longestCpuMs) {
      longestCpuMs = cpu;
      longestCpuWhat = QStringLiteral("%1 event %2").arg(what).arg(type);
    }
    if (measuring && elapsed > longestWallMs)
      longestWallMs = elapsed;
    return handled;
  }
  // CPU time the GUI thread spent in one delivery: what it did, not counting the time the
  // kernel gave its core to the worker threads (or to other processes on a loaded machine).
  static double threadCpuMs() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
  }
  bool measuring = false;
  double longestCpuMs = 0;
  QString longestCpuWhat;
  qint64 longestWallMs = 0;

 private:
  int m_depth = 0;
};

class TestResponsiveness : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    initializeGuiLibrary();
  }

  void millionEventRunNeverStallsTheEventLoop() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("big.db"));
    constexpr std::size_t kEvents = 1'200'000;
    storage::RunId run;
    {
      storage::RunStore store(db.toStdString());
      run = test::addRun(store, "million", test::wavyTrace(kEvents, 11, true), {},
                         storage::RunStatus::oom);
    }
    MainWindow window;
    window.resize(1400, 900);
    QVERIFY(window.openDatabase(db));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QTest::qWait(50);

    auto* app = static_cast<TimingApplication*>(QCoreApplication::instance());
    app->measuring = true;
    StallMeter meter;
    QElapsedTimer loading;
    loading.start();
    window.showRun(run);
    SegmentMapPage* segments = window.segmentMapPage();
    QVERIFY(
        test::waitFor([&] { return segments->snapshot().has_value() && !window.busy(); }, 120000));
    const qint64 loadMs = loading.elapsed();
    QCOMPARE(segments->snapshot()->eventIndex, kEvents - 1);  // opened at the OOM

    // Zoom in steps, as a user with the wheel would, and move the cursor.
    TimelinePage* timeline = window.timelinePage();
    for (std::uint64_t width : {500'000u, 100'000u, 10'000u, 1'000u}) {
      QSignalSpy ready(timeline, &TimelinePage::dataReady);
      timeline->zoomStack()->zoomContinuous({400'000, 400'000 + width});
      QVERIFY(ready.wait(60000));
      timeline->setCursorEvent(400'000 + width / 2);
      QVERIFY(test::waitFor([&] { return !window.busy(); }, 60000));
    }
    timeline->zoomStack()->zoomOut();
    QVERIFY(test::waitFor([&] { return !window.busy(); }, 60000));
    app->measuring = false;
    qInfo(
        "1.2M-event run: loaded in %lld ms; longest GUI-thread event %.1f ms CPU (%s), %lld ms "
        "wall; longest timer gap %lld ms",
        loadMs, app->longestCpuMs, qPrintable(app->longestCpuWhat), app->longestWallMs,
        meter.maxGapMs());
    // The 100 ms limit is a speed target, checked by fragscope-gui-bench
    // (BM_LongestGuiThreadEvent), not here: under sanitizers or on a loaded machine a timed
    // assertion fails for reasons that are not bugs. This test pins the behaviour: the run loads,
    // opens at the OOM, zooms and moves its cursor, with the event loop running throughout.
  }
};

int main(int argc, char** argv) {
  TimingApplication app(argc, argv);
  TestResponsiveness test;
  return QTest::qExec(&test, argc, argv);
}
#include "tst_responsiveness.moc"
