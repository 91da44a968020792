// Models and plain-data helpers of the GUI: every model under QAbstractItemModelTester, the zoom
// history, the segment-map classification and layout, run-list parsing.
#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QTest>

#include "gui/application.h"
#include "gui/compare_page.h"
#include "gui/format.h"
#include "gui/runs_model.h"
#include "gui/segment_layout.h"
#include "gui/zoom_stack.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {
storage::RunRecord record(std::int64_t id, const std::string& name, storage::RunStatus status,
                          std::int64_t peakReserved, const std::string& config = {}) {
  storage::RunRecord run;
  run.id = storage::RunId(id);
  run.name = name;
  run.status = status;
  run.alloc_conf = config;
  run.event_count = static_cast<std::uint64_t>(id) * 1000;
  run.summary["peaks"] = {
      {"allocated", peakReserved / 2}, {"reserved", peakReserved}, {"active", peakReserved / 2}};
  run.summary["final"] = {{"reserved", peakReserved}};
  return run;
}
}  // namespace

class TestModels : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { initializeGuiLibrary(); }

  void runsModelUnderTester() {
    RunsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    RunsFilterModel filter;
    QAbstractItemModelTester filterTester(&filter,
                                          QAbstractItemModelTester::FailureReportingMode::QtTest);
    filter.setSourceModel(&model);
    model.resetData(
        {record(1, "baseline", storage::RunStatus::ok, 3 * kGiB),
         record(2, "expandable", storage::RunStatus::ok, 2 * kGiB, "expandable_segments:True"),
         record(3, "capped", storage::RunStatus::oom, 6 * kGiB)});
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.columnCount(), int(RunsModel::ColumnCount));
    QCOMPARE(model.index(2, RunsModel::StatusColumn).data().toString(), QStringLiteral("oom"));
    QCOMPARE(model.index(0, RunsModel::PeakReservedColumn).data().toString(),
             QStringLiteral("3.00 GiB"));
    QCOMPARE(model.index(0, RunsModel::ConfigColumn).data().toString(),
             QStringLiteral("(default)"));

    // Numbers sort as numbers, not as text ("6.00 GiB" > "3.00 GiB" > "2.00 GiB").
    filter.sort(RunsModel::PeakReservedColumn, Qt::DescendingOrder);
    QCOMPARE(filter.index(0, RunsModel::NameColumn).data().toString(), QStringLiteral("capped"));
    QCOMPARE(filter.index(2, RunsModel::NameColumn).data().toString(),
             QStringLiteral("expandable"));

    filter.setFilterWords(QStringLiteral("EXPANDABLE_seg"));
    QCOMPARE(filter.rowCount(), 1);
    filter.setFilterWords(QString());
    filter.setStatusFilter(QStringLiteral("oom"));
    QCOMPARE(filter.rowCount(), 1);
    QCOMPARE(filter.index(0, 0).data().toString(), QStringLiteral("capped"));
    filter.setStatusFilter(QString());
    QCOMPARE(filter.rowCount(), 3);

    QSignalSpy rename(&model, &RunsModel::renameRequested);
    QVERIFY(model.setData(model.index(1, RunsModel::NameColumn), QStringLiteral("  renamed ")));
    QCOMPARE(rename.count(), 1);
    QCOMPARE(rename.at(0).at(0).value<storage::RunId>(), storage::RunId(2));
    QCOMPARE(rename.at(0).at(1).toString(), QStringLiteral("renamed"));
    QVERIFY(!model.setData(model.index(1, RunsModel::NameColumn), QStringLiteral("   ")));
    QVERIFY(!model.setData(model.index(1, RunsModel::StatusColumn), QStringLiteral("x")));
    model.updateName(storage::RunId(2), QStringLiteral("renamed"));
    QCOMPARE(model.index(1, 0).data().toString(), QStringLiteral("renamed"));
    QCOMPARE(model.index(1, 0).data(RunsModel::RunIdRole).value<storage::RunId>(),
             storage::RunId(2));
    model.clearData();
    QCOMPARE(filter.rowCount(), 0);
  }

  void comparisonModelHighlightsDifferences() {
    ComparisonModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    ComparisonData data;
    data.runs.push_back(ComparedRun{record(1, "a", storage::RunStatus::ok, 4 * kGiB),
                                    {},
                                    0,
                                    std::nullopt,
                                    std::nullopt,
                                    {},
                                    {},
                                    {},
                                    {},
                                    0,
                                    std::nullopt});
    data.runs.push_back(ComparedRun{record(2, "b", storage::RunStatus::ok, 4 * kGiB),
                                    {},
                                    0,
                                    std::nullopt,
                                    std::nullopt,
                                    {},
                                    {},
                                    {},
                                    {},
                                    0,
                                    std::nullopt});
    data.runs.push_back({record(3, "c", storage::RunStatus::oom, 5 * kGiB, "max_split_size_mb:64"),
                         {},
                         2,
                         std::nullopt,
                         std::nullopt,
                         {},
                         {},
                         {},
                         {},
                         0,
                         std::nullopt});
    data.runs[1].record.event_count = data.runs[0].record.event_count + 500;
    model.resetData(data);
    QCOMPARE(model.columnCount(), 3);
    QVERIFY(model.rowCount() >= 5);
    QCOMPARE(model.headerData(0, Qt::Vertical).toString(), QStringLiteral("Peak reserved"));
    QCOMPARE(model.index(0, 0).data(ComparisonModel::ValueRole).toDouble(), double(4 * kGiB));
    QVERIFY(!model.index(0, 1).data(ComparisonModel::DiffersRole).toBool());
    QVERIFY(model.index(0, 2).data(ComparisonModel::DiffersRole).toBool());
    QVERIFY(model.index(0, 2).data(Qt::BackgroundRole).isValid());
    QVERIFY(model.index(0, 2).data().toString().contains(QStringLiteral("+1.00 GiB")));
    // More memory is worse (red); more events is only different (a run that did not stop at an
    // OOM has more), so it is marked in neither red nor green.
    const QColor worse = model.index(0, 2).data(Qt::BackgroundRole).value<QColor>();
    QVERIFY(worse.red() > worse.green());
    int eventsRow = -1;
    for (int row = 0; row < model.rowCount(); ++row)
      if (model.headerData(row, Qt::Vertical).toString() == QStringLiteral("Events"))
        eventsRow = row;
    QVERIFY(eventsRow >= 0);
    QVERIFY(model.index(eventsRow, 1).data(ComparisonModel::DiffersRole).toBool());
    const QColor events = model.index(eventsRow, 1).data(Qt::BackgroundRole).value<QColor>();
    QVERIFY(events.isValid());
    QVERIFY(events != worse);
    QVERIFY(events != model.index(0, 0).data(Qt::BackgroundRole).value<QColor>());
    QCOMPARE(events, QColor(0xf2, 0xc1, 0x4e, 60));
    const QStringList warnings = comparisonWarnings(data);
    QCOMPARE(warnings.size(), 1);
    QVERIFY(warnings.front().contains(QStringLiteral("max_split_size_mb:64")));
    model.clearData();
    QCOMPARE(model.rowCount(), 0);
  }

  void zoomStackHistory() {
    ZoomStack zoom;
    QSignalSpy changed(&zoom, &ZoomStack::zoomChanged);
    zoom.reset({0, 1000});
    QVERIFY(!zoom.canGoBack());
    zoom.zoomTo({100, 200});
    zoom.zoomContinuous({110, 210});
    zoom.zoomContinuous({120, 220});  // same gesture: one history entry
    zoom.endGesture();
    zoom.zoomContinuous({130, 230});
    QCOMPARE(zoom.current(), (EventRange{130, 230}));
    zoom.back();
    QCOMPARE(zoom.current(), (EventRange{120, 220}));
    zoom.back();
    QCOMPARE(zoom.current(), (EventRange{100, 200}));
    zoom.back();
    QCOMPARE(zoom.current(), (EventRange{0, 1000}));
    QVERIFY(!zoom.backAction()->isEnabled());
    zoom.forward();
    QCOMPARE(zoom.current(), (EventRange{100, 200}));
    QVERIFY(zoom.forwardAction()->isEnabled());
    zoom.zoomTo({900, 5000});  // clamped to the run
    QCOMPARE(zoom.current(), (EventRange{900, 1000}));
    QVERIFY(!zoom.canGoForward());
    zoom.zoomTo({500, 500});  // never empty
    QCOMPARE(zoom.current().size(), 1u);
    zoom.zoomOut();
    QCOMPARE(zoom.current(), (EventRange{0, 1000}));
    QVERIFY(changed.count() >= 8);
  }

  void segmentViewsClassifyPieces() {
    storage::SegmentMap map;
    const std::uint64_t a = 0x1000000, b = 0x4000000, c = 0x8000000;
    map.apply({TraceAction::segment_alloc, a, 20 * kMiB, StreamId{0}, 0, {}});
    map.apply({TraceAction::segment_alloc, b, 2 * kMiB, StreamId{7}, 0, {}});
    map.apply({TraceAction::segment_alloc, c, 10 * kMiB, StreamId{0}, 0, {}});
    map.apply({TraceAction::alloc, a, 4 * kMiB, StreamId{0}, 0, {}});
    map.apply({TraceAction::alloc, a + 8 * kMiB, 2 * kMiB, StreamId{0}, 0, {}});
    map.apply({TraceAction::free_requested, a + 8 * kMiB, 2 * kMiB, StreamId{0}, 0, {}});
    map.apply({TraceAction::alloc, b, 512 * kKiB, StreamId{7}, 0, {}});
    const auto views = segmentViews(map);
    QCOMPARE(views.size(), 3u);
    // Segment a: allocated 4 MiB, free 4 MiB, pending 2 MiB, free 10 MiB.
    QCOMPARE(views[0].pieces.size(), 4u);
    QCOMPARE(int(views[0].pieces[0].kind), int(PieceKind::allocated));
    QCOMPARE(int(views[0].pieces[1].kind), int(PieceKind::freeInSplitSegment));
    QCOMPARE(views[0].pieces[1].size, 4 * kMiB);
    QCOMPARE(int(views[0].pieces[2].kind), int(PieceKind::pendingFree));
    QCOMPARE(views[0].pieces[3].size, 10 * kMiB);
    QCOMPARE(views[0].largestFree, 10 * kMiB);
    QCOMPARE(int(views[0].pool), int(SegmentKind::large));
    QCOMPARE(int(views[1].pool), int(SegmentKind::small));
    QCOMPARE(int(views[2].pieces.front().kind), int(PieceKind::freeWholeSegment));
    for (const SegmentView& view : views) {
      Bytes covered = 0;
      std::uint64_t expected = view.segment.base;
      for (const Piece& piece : view.pieces) {
        QCOMPARE(piece.addr, expected);
        expected += piece.size;
        covered += piece.size;
      }
      QCOMPARE(covered, view.segment.size);
    }
    const SegmentMapSummary summary = summarize(views);
    QCOMPARE(summary.reserved, 32 * kMiB);
    QCOMPARE(summary.blocks, 3u);
    QCOMPARE(summary.pendingFree, 2 * kMiB);
    QCOMPARE(summary.freeWhole, 10 * kMiB);
    QCOMPARE(summary.largestFree, 10 * kMiB);
    QCOMPARE(summary.live, 4 * kMiB + 2 * kMiB + 512 * kKiB);

    // Every byte gets the same area: a 20 MiB segment is ten times a 2 MiB one.
    const SegmentLayout layout = layoutSegments(views, QSizeF(800, 300));
    double areaA = 0, areaB = 0;
    for (const PlacedPiece& placed : layout.placed) {
      const double area = placed.rect.width() * placed.rect.height();
      if (placed.segment == 0)
        areaA += area;
      else if (placed.segment == 1)
        areaB += area;
      QVERIFY(placed.rect.right() <= 800.5);
    }
    QVERIFY2(std::abs(areaA / areaB - 10.0) < 0.5, qPrintable(QString::number(areaA / areaB)));
  }

  // Hundreds of segments in a short map (the report's, the Compare page's peak maps): the gaps
  // between segments and the pixel each small block gets must not push rows past the bottom.
  void manySegmentsStayInsideTheMap() {
    std::vector<SegmentView> views;
    std::uint64_t base = 0x7f0000000000;
    for (int s = 0; s < 342; ++s) {
      SegmentView view;
      const Bytes size = (s % 7 == 0 ? 20 : 112) * kMiB;
      view.segment.base = base;
      view.segment.size = size;
      for (Bytes at = 0; at < size;) {
        const Bytes piece = std::min<Bytes>(size - at, (s % 3 + 1) * 7 * kMiB);
        view.pieces.push_back({base + at, piece, PieceKind::allocated, {}});
        at += piece;
      }
      base += size;
      views.push_back(std::move(view));
    }
    const QSizeF area(892, 222);
    const SegmentLayout layout = layoutSegments(views, area);
    QVERIFY(!layout.placed.empty());
    double bottom = 0;
    for (const PlacedPiece& placed : layout.placed) {
      bottom = std::max(bottom, placed.rect.bottom());
      QVERIFY(placed.rect.right() <= area.width() + 0.5);
    }
    QVERIFY2(bottom <= area.height() + 0.5, qPrintable(QString::number(bottom)));
    QCOMPARE(layout.placed.back().segment, views.size() - 1);
  }

  void parseRunLists() {
    QString error;
    const auto runs = parseRunList(QStringLiteral("3, 7,12"), &error);
    QVERIFY(runs);
    QCOMPARE(runs->size(), 3u);
    QCOMPARE((*runs)[1], storage::RunId(7));
    QVERIFY(!parseRunList(QStringLiteral("3,x"), &error));
    QVERIFY(error.contains(QStringLiteral("\"x\"")));
    QVERIFY(!parseRunList(QString(), &error));
  }

  void formatting() {
    QCOMPARE(formatBytes(512), QStringLiteral("512 B"));
    QCOMPARE(formatBytes(20.0 * 1024 * 1024), QStringLiteral("20.0 MiB"));
    QCOMPARE(formatBytes(1.5 * 1024 * 1024 * 1024), QStringLiteral("1.50 GiB"));
    QCOMPARE(formatBytesDelta(-3.0 * 1024 * 1024 * 1024), QStringLiteral("\u22123.00 GiB"));
    QCOMPARE(formatCount(1234567), QStringLiteral("1,234,567"));
  }
};

QTEST_MAIN(TestModels)
#include "tst_models.moc"
