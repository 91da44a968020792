// The summary page, offscreen: PyTorch's memory_summary() at the cursor. A real recording at its
// end prints exactly what PyTorch printed (the fixture's summary.txt); an earlier cursor prints
// the state there, replayed off the GUI thread, and a newer cursor supersedes an older one.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTest>
#include <cstdlib>

#include "engine/allocator/summary.h"
#include "engine/snapshot/recording_stats.h"
#include "engine/snapshot/snapshot.h"
#include "gui/format.h"
#include "gui/summary_page.h"
#include "gui_test_util.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "storage/db/stats_keyframes.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestSummaryPage : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  QString m_db;
  storage::RunId m_run;
  storage::RunRecord m_record;

  static QString fixture(const QString& name) {
    return QStringLiteral(FRAGSCOPE_FIXTURES "/") + name;
  }
  static QString readText(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
      return {};
    return QString::fromUtf8(file.readAll());
  }
  static SegmentSnapshotAt cursorAt(storage::RunId run, std::uint64_t event, std::uint64_t count) {
    SegmentSnapshotAt state;
    state.run = run;
    state.eventIndex = event;
    state.eventCount = count;
    return state;
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("summary.db"));
    storage::RunStore store(m_db.toStdString());
    storage::ImportOptions options;
    options.name = "random_default";
    m_run = storage::import_snapshot(
                store,
                snapshot::read_snapshot(
                    fixture(QStringLiteral("random_default.pickle.gz")).toStdString()),
                options)
                .run;
    m_record = store.run(m_run);
  }

  // Every row of FragScope's own table at the end of a real recording against the
  // memory_stats() PyTorch returned there (NAME.stats.json): the figures PyTorch also has must be
  // PyTorch's, so the page never disagrees with the memory_summary() table above it.
  void ownRowsAgreeWithRecordedMemoryStats_data() {
    QTest::addColumn<QString>("pickle");
    const QDir fixtures(QStringLiteral(FRAGSCOPE_FIXTURES));
    for (const QString& dir :
         QStringList{fixtures.path(), fixtures.path() + QStringLiteral("-turn2")})
      for (const QFileInfo& file : QDir(dir).entryInfoList({QStringLiteral("*.stats.json")})) {
        const QString pickle = file.absolutePath() + QLatin1Char('/') +
                               file.fileName().chopped(int(sizeof(".stats.json") - 1)) +
                               QStringLiteral(".pickle.gz");
        if (QFileInfo::exists(pickle))
          QTest::newRow(qPrintable(file.fileName())) << pickle;
      }
  }
  void ownRowsAgreeWithRecordedMemoryStats() {
    QFETCH(QString, pickle);
    QString statsPath = pickle;
    statsPath.replace(QStringLiteral(".pickle.gz"), QStringLiteral(".stats.json"));
    const nlohmann::json recorded = snapshot::read_recording_stats(statsPath.toStdString());
    const nlohmann::json& stats = recorded.at("memory_stats");
    const auto stat = [&](const char* key) { return stats.at(key).get<std::int64_t>(); };

    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("stats.db"));
    storage::RunRecord record;
    {
      storage::RunStore store(db.toStdString());
      storage::ImportOptions options;
      options.name = QFileInfo(pickle).fileName().toStdString();
      options.recorded_stats = recorded;
      const auto imported =
          storage::import_snapshot(store, snapshot::read_snapshot(pickle.toStdString()), options);
      record = store.run(imported.run);
    }
    const SegmentSnapshotAt state = loadSegmentSnapshot(db, record.id, record.event_count);
    const SegmentMapSummary& summary = state.summary;
    // The figures, as numbers ...
    QCOMPARE(static_cast<std::int64_t>(summary.reserved), stat("reserved_bytes.all.current"));
    QCOMPARE(static_cast<std::int64_t>(summary.live), stat("requested_bytes.all.current"));
    QCOMPARE(static_cast<std::int64_t>(summary.blocks), stat("active.all.current"));
    QCOMPARE(static_cast<std::int64_t>(summary.freeInSplit),
             stat("inactive_split_bytes.all.current"));
    QCOMPARE(static_cast<std::int64_t>(summary.segments), stat("segment.all.current"));
    QCOMPARE(static_cast<std::int64_t>(summary.freeBytes()),
             stat("reserved_bytes.all.current") - stat("active_bytes.all.current"));
    // ... and as the page prints them, with the run's peaks beside them.
    const QString text = stateSummaryText(record, &state);
    const auto row = [&](const QString& name) {
      const QRegularExpression line(QStringLiteral("\\| ") + QRegularExpression::escape(name) +
                                    QStringLiteral(" +\\| +([^|]*?) +\\| +([^|]*?) *\\|"));
      const QRegularExpressionMatch match = line.match(text);
      return match.hasMatch() ? QStringList{match.captured(1), match.captured(2)} : QStringList{};
    };
    const auto bytes = [](std::int64_t value) { return formatBytes(static_cast<double>(value)); };
    QCOMPARE(row(QStringLiteral("Reserved memory")),
             (QStringList{bytes(stat("reserved_bytes.all.current")),
                          bytes(stat("reserved_bytes.all.peak"))}));
    QCOMPARE(row(QStringLiteral("Live blocks (request bytes)")),
             (QStringList{bytes(stat("requested_bytes.all.current")),
                          bytes(stat("requested_bytes.all.peak"))}));
    QCOMPARE(row(QStringLiteral("Free in split segments")),
             (QStringList{bytes(stat("inactive_split_bytes.all.current")), QString()}));
    QCOMPARE(row(QStringLiteral("Segments")),
             (QStringList{QString::number(stat("segment.all.current")), QString()}));
    QCOMPARE(row(QStringLiteral("Live blocks")),
             (QStringList{QString::number(stat("active.all.current")), QString()}));

    // Inside the run, where live blocks carry their rounding (the recording's end has few), the
    // page's figures against the model's replay there, which is PyTorch's memory_stats() (the
    // replay is byte-exact on these recordings).
    for (const std::uint64_t at :
         {record.event_count / 4, record.event_count / 2, record.event_count * 3 / 4}) {
      const PyTorchSummaryAt model = loadPyTorchSummary(db, record.id, at);
      QVERIFY(!model.diverged);
      const SegmentSnapshotAt there = loadSegmentSnapshot(db, record.id, model.eventIndex);
      const SegmentMapSummary figures = summaryFigures(there, &model);
      storage::RunStore store(db.toStdString(), storage::OpenMode::read_only);
      const alloc::DeviceStats stats = storage::memory_stats_at(store, record.id, at).stats;
      const auto current = [&](const alloc::StatArray& array) {
        return array[alloc::StatType::aggregate].current;
      };
      const QByteArray where = "after event " + QByteArray::number(model.eventIndex);
      QVERIFY2(static_cast<std::int64_t>(figures.reserved) == current(stats.reserved_bytes),
               where.constData());
      QVERIFY2(static_cast<std::int64_t>(figures.live) == current(stats.requested_bytes),
               where.constData());
      QVERIFY2(static_cast<std::int64_t>(figures.blocks) == current(stats.active),
               where.constData());
      QVERIFY2(static_cast<std::int64_t>(figures.segments) == current(stats.segment),
               where.constData());
      QVERIFY2(
          static_cast<std::int64_t>(figures.freeInSplit) == current(stats.inactive_split_bytes),
          where.constData());
      QVERIFY2(static_cast<std::int64_t>(figures.freeBytes()) ==
                   current(stats.reserved_bytes) - current(stats.active_bytes),
               where.constData());
      QVERIFY(figures.largestFree <= figures.freeBytes());
      // The map alone (no replay yet) infers the rounding by the split rule: within 1 MiB of
      // PyTorch's for each live block.
      const SegmentMapSummary map = there.summary;
      const auto off = std::abs(static_cast<std::int64_t>(map.freeInSplit) -
                                current(stats.inactive_split_bytes));
      QVERIFY2(off <= static_cast<std::int64_t>(map.blocks * kMiB), where.constData());
    }
  }

  void divergedReplayPutsTheRecordingsFiguresFirst() {
    // One 64 GiB segment serving a 1 MiB request: PyTorch's allocator would have taken a 2 MiB
    // small-pool segment, so the model cannot follow this trace from its first event.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("diverged.db"));
    const std::uint64_t base = 0x7f0000000000;
    const std::vector<TraceEvent> events{
        {TraceAction::segment_alloc, base, 64 * kGiB, StreamId{0}, 0, {}},
        {TraceAction::alloc, base, kMiB, StreamId{0}, 0, {}}};
    storage::RunRecord record;
    {
      storage::RunStore store(db.toStdString());
      const storage::RunId run = test::addRun(store, "diverged", events);
      // A recording (its allocator_settings, as an import stores them) is compared with its replay.
      nlohmann::json summary = store.run(run).summary;
      summary["allocator_settings"] = m_record.summary.at("allocator_settings");
      store.update_summary(run, summary);
      record = store.run(run);
    }
    SummaryPage page;
    page.setDatabase(db);
    QSignalSpy ready(&page, &SummaryPage::pytorchSummaryReady);
    page.setRun(record);
    SegmentSnapshotAt state = cursorAt(record.id, 2, 2);
    state.summary.segments = 1;
    state.summary.blocks = 1;
    state.summary.reserved = 64 * kGiB;
    state.summary.live = kMiB;
    page.setState(state);
    QVERIFY(test::waitFor([&] { return ready.count() > 0 && !page.busy(); }));
    QVERIFY(page.pytorchSummary()->diverged);
    QVERIFY(page.pytorchSummary()->modelReserved != 64 * kGiB);
    const QString text = page.text();
    const auto comparison = text.indexOf(QStringLiteral("What the recording says"));
    QVERIFY(comparison >= 0);
    QVERIFY(comparison < text.indexOf(QStringLiteral("PyTorch CUDA memory summary")));
    QVERIFY(text.contains(QRegularExpression(QStringLiteral("Reserved memory +64\\.0 GiB"))));
    QVERIFY(text.contains(QRegularExpression(QStringLiteral("Segments +1 "))));
  }

  void endOfRunIsPyTorchsOwnSummary() {
    SummaryPage page;
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &SummaryPage::pytorchSummaryReady);
    const storage::RunRecord& record = m_record;
    page.setRun(record);
    QVERIFY(test::waitFor([&] { return ready.count() > 0 && !page.busy(); }));
    QVERIFY(page.pytorchSummary().has_value());
    QCOMPARE(page.pytorchSummary()->eventIndex, record.event_count);
    const QString expected = readText(fixture(QStringLiteral("random_default.summary.txt")));
    QVERIFY(!expected.isEmpty());
    QCOMPARE(page.pytorchSummary()->full, expected);
    QVERIFY(page.text().contains(expected));
    QVERIFY(page.pytorchSummary()->caveats.isEmpty());
    QVERIFY(!page.pytorchSummary()->diverged);
    QVERIFY(!page.text().contains(QStringLiteral("What the recording says")));
  }

  void cursorShowsTheStateThereAndTheNewestCursorWins() {
    SummaryPage page;
    page.setDatabase(m_db);
    QSignalSpy ready(&page, &SummaryPage::pytorchSummaryReady);
    const storage::RunRecord& record = m_record;
    page.setRun(record);
    // Steps faster than the debounce: only the last cursor is replayed and shown.
    for (std::uint64_t event : {10u, 500u, 2000u})
      page.setState(cursorAt(m_run, event, record.event_count));
    const std::uint64_t last = record.event_count / 2;
    page.setState(cursorAt(m_run, last, record.event_count));
    QVERIFY(test::waitFor([&] { return ready.count() > 0 && !page.busy(); }));
    QCOMPARE(ready.count(), 1);
    const auto& shown = *page.pytorchSummary();
    QVERIFY(shown.eventIndex >= last && shown.eventIndex <= last + 64);
    storage::RunStore store(m_db.toStdString(), storage::OpenMode::read_only);
    const storage::MemoryStatsAt expected = storage::memory_stats_at(store, m_run, last);
    QCOMPARE(shown.full, QString::fromStdString(alloc::memory_summary(expected.stats, 0, false)));
    QVERIFY(shown.full != readText(fixture(QStringLiteral("random_default.summary.txt"))));

    // The abbreviated form is the same state without the pool rows.
    auto* abbreviated = page.findChild<QCheckBox*>();
    QVERIFY(abbreviated);
    abbreviated->setChecked(true);
    QVERIFY(page.text().contains(shown.abbreviated));
    QVERIFY(!page.text().contains(shown.full));
  }

  // A run stored without allocator-state keyframes (by a path that stores none: a replayed
  // mitigation, a GPU run, or a database from before they were kept) gets them when its Summary
  // is first shown, so that replay and every later cursor's start at the keyframe before the
  // cursor instead of replaying the run from event 0 (#19: the Summary at any cursor of a
  // 1.2M-event run in < 50 ms).
  void runWithoutKeyframesGetsThemOnItsFirstSummary() {
    const QString db = m_dir.filePath(QStringLiteral("bare.db"));
    storage::RunId run;
    storage::RunRecord record;
    {
      storage::RunStore store(db.toStdString());
      storage::ImportOptions options;
      options.name = "bare";
      run = storage::import_snapshot(
                store,
                snapshot::read_snapshot(
                    fixture(QStringLiteral("random_default.pickle.gz")).toStdString()),
                options)
                .run;
      auto erase = store.database().prepare("DELETE FROM stats_keyframes WHERE run_id = ?");
      erase.bind_int(1, run.value);
      erase.run();
      nlohmann::json summary = store.run(run).summary;
      summary.erase("stats_keyframes");
      store.update_summary(run, summary);
      record = store.run(run);
    }
    QVERIFY(storage::stats_keyframes_missing(record));
    SummaryPage page;
    page.setDatabase(db);
    QSignalSpy ready(&page, &SummaryPage::pytorchSummaryReady);
    page.setRun(record);
    const std::uint64_t cursor = record.event_count * 2 / 3;
    page.setState(cursorAt(run, cursor, record.event_count));
    QVERIFY(test::waitFor([&] { return ready.count() > 0 && !page.busy(); }));
    const PyTorchSummaryAt& shown = *page.pytorchSummary();
    QVERIFY2(shown.noKeyframes.isEmpty(), qPrintable(shown.noKeyframes));
    storage::RunStore store(db.toStdString(), storage::OpenMode::read_only);
    QVERIFY(!storage::stats_keyframes_missing(store.run(run)));
    const storage::MemoryStatsAt fromKeyframe = storage::memory_stats_at(store, run, cursor);
    QVERIFY(fromKeyframe.replayed_from >= storage::kStatsKeyframeInterval);
    QCOMPARE(shown.eventIndex, fromKeyframe.event_index);
    // The same state as the whole prefix replayed.
    const storage::MemoryStatsAt fromStart =
        storage::memory_stats_at(store, run, cursor, storage::StatsStart::first_event);
    QCOMPARE(shown.full, QString::fromStdString(alloc::memory_summary(fromStart.stats, 0, false)));
  }
};

QTEST_MAIN(TestSummaryPage)
#include "tst_summary_page.moc"
