// Pools on the segment map and the Summary page (issue #15): a torch.compile reduce-overhead
// recording ends with 126 segments in its graph pool (0,1) and 51 in the default pools; the
// state the segment map loads says so, and the Summary page prints one line per pool.
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>

#include "engine/snapshot/snapshot.h"
#include "gui/pool_overview.h"
#include "gui/run_data.h"
#include "gui/summary_page.h"
#include "storage/db/snapshot_import.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestPoolOverview : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;

  storage::RunId import(const QString& db, const QString& file) {
    storage::RunStore store(db.toStdString());
    storage::ImportOptions options;
    options.name = QFileInfo(file).baseName().toStdString();
    return storage::import_snapshot(store, snapshot::read_snapshot(file.toStdString()), options)
        .run;
  }

 private slots:
  void graphPoolAtTheEnd() {
    QVERIFY(m_dir.isValid());
    const QString db = m_dir.filePath(QStringLiteral("graphs.db"));
    const storage::RunId run = import(
        db, QStringLiteral(FRAGSCOPE_FIXTURES
                           "/../torch-2.11-h200-graphs/gpt_compile_reduce_overhead.pickle.gz"));
    storage::RunRecord record;
    {
      storage::RunStore store(db.toStdString());
      record = store.run(run);
    }
    const SegmentSnapshotAt end = loadSegmentSnapshot(db, run, record.event_count);
    QCOMPARE(end.pools.size(), std::size_t{2});
    QVERIFY(end.pools[0].pool.is_default());
    QCOMPARE(end.pools[0].segments, std::size_t{51});
    QCOMPARE(end.pools[1].pool, (MempoolId{0, 1}));
    QCOMPARE(end.pools[1].segments, std::size_t{126});
    QCOMPARE(end.pools[0].reserved + end.pools[1].reserved, end.summary.reserved);

    const QString text = stateSummaryText(record, &end);
    QVERIFY2(text.contains(QStringLiteral("private pool (0, 1) (graph pool handle or MemPool): "
                                          "126 segments")),
             qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("default pools: 51 segments")), qPrintable(text));

    // The segment map marks each segment with its pool: the same split as the overview.
    QCOMPARE(end.segmentPools.size(), end.views.size());
    std::size_t inGraphPool = 0;
    for (const MempoolId& pool : end.segmentPools)
      inGraphPool += pool == MempoolId{0, 1} ? 1 : 0;
    QCOMPARE(inGraphPool, std::size_t{126});
    QCOMPARE(segmentPoolText(MempoolId{0, 1}),
             QStringLiteral("private pool (0, 1) (graph pool handle or MemPool)"));
    QVERIFY(segmentPoolText(MempoolId{}).isEmpty());
  }

  void noPoolLinesWithoutPrivatePools() {
    const QString db = m_dir.filePath(QStringLiteral("plain.db"));
    const storage::RunId run =
        import(db, QStringLiteral(FRAGSCOPE_FIXTURES "/gpt_oom_cap.pickle.gz"));
    const SegmentSnapshotAt state = loadSegmentSnapshot(db, run, 1000);
    QVERIFY(state.pools.empty() || poolOverviewText(state.pools).isEmpty());
    QVERIFY(state.segmentPools.empty());
  }
};

QTEST_GUILESS_MAIN(TestPoolOverview)
#include "tst_pool_overview.moc"
