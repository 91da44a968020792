// The device picker for multi-device snapshots (issue #13): every device with trace entries or
// segments is offered (a state-only device too), the user's choice is what gets imported and
// named, and declining the picker cancels the import without writing a run.
#include <QTemporaryDir>
#include <QTest>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "gui/snapshot_import.h"
#include "storage/db/run_store.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestDevicePicker : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;

  static QString variant(const QString& name) {
    return QStringLiteral(FRAGSCOPE_FIXTURES "/../snapshot-variants/") + name;
  }

 private slots:
  void offersEveryDeviceWithContent() {
    // Device 0 and 2 have five entries each, device 1 nothing: two choices.
    const auto multi =
        snapshot::read_snapshot(variant(QStringLiteral("multi_device.pickle")).toStdString());
    const std::vector<DeviceChoice> choices = deviceChoices(multi);
    QCOMPARE(choices.size(), std::size_t{2});
    QCOMPARE(choices[0].device, std::size_t{0});
    QCOMPARE(choices[1].device, std::size_t{2});
    QCOMPARE(choices[1].entries, std::uint64_t{5});
    QVERIFY2(choices[1].label.startsWith(QStringLiteral("cuda:2: 5 trace entries")),
             qPrintable(choices[1].label));

    // A device with segments but no trace is offered as state only.
    const auto stateOnly = snapshot::read_snapshot(
        variant(QStringLiteral("multi_device_state_only_device.pickle")).toStdString());
    const std::vector<DeviceChoice> both = deviceChoices(stateOnly);
    QCOMPARE(both.size(), std::size_t{2});
    QCOMPARE(both[1].entries, std::uint64_t{0});
    QVERIFY2(both[1].label.endsWith(QStringLiteral(" (state only)")), qPrintable(both[1].label));
  }

  void importsThePickedDevice() {
    QVERIFY(m_dir.isValid());
    const QString db = m_dir.filePath(QStringLiteral("picked.db"));
    std::vector<DeviceChoice> offered;
    const DevicePicker pickLast = [&](const std::vector<DeviceChoice>& choices,
                                      const QString& fileName) -> std::optional<std::size_t> {
      offered = choices;
      if (fileName != QStringLiteral("multi_device.pickle"))
        return std::nullopt;
      return choices.back().device;
    };
    const ImportResult result =
        importSnapshotFile(db, variant(QStringLiteral("multi_device.pickle")), nullptr, pickLast);
    QCOMPARE(offered.size(), std::size_t{2});
    QVERIFY2(result.name.endsWith(QStringLiteral(" (cuda:2)")), qPrintable(result.name));
    QCOMPARE(result.events, std::uint64_t{5});
    storage::RunStore store(db.toStdString());
    QCOMPARE(store.list_runs().size(), std::size_t{1});
  }

  void decliningCancelsWithoutARun() {
    const QString db = m_dir.filePath(QStringLiteral("declined.db"));
    const DevicePicker decline = [](const std::vector<DeviceChoice>&,
                                    const QString&) -> std::optional<std::size_t> {
      return std::nullopt;
    };
    bool cancelled = false;
    try {
      importSnapshotFile(db, variant(QStringLiteral("multi_device.pickle")), nullptr, decline);
    } catch (const InputError& error) {
      cancelled = std::string(error.what()).find("cancelled") != std::string::npos;
    }
    QVERIFY(cancelled);
    storage::RunStore store(db.toStdString());
    QVERIFY(store.list_runs().empty());
  }

  void singleDeviceFilesAreNotAsked() {
    const QString db = m_dir.filePath(QStringLiteral("single.db"));
    bool asked = false;
    const DevicePicker picker = [&](const std::vector<DeviceChoice>&,
                                    const QString&) -> std::optional<std::size_t> {
      asked = true;
      return std::nullopt;
    };
    importSnapshotFile(db, variant(QStringLiteral("v2_5_annotations.pickle")), nullptr, picker);
    QVERIFY(!asked);
  }
};

QTEST_GUILESS_MAIN(TestDevicePicker)
#include "tst_device_picker.moc"
