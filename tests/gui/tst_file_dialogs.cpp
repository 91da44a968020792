// The application's file dialogs never open the files of the folder they show. Qt's own dialog
// read every file whose name does not tell its type (QMimeDatabase's content match): shown the
// database's folder (File ▸ Open Database starts there), it opened and closed `NAME.db-shm`,
// which dropped this process's POSIX locks on it; the next process to open the database then
// truncated the WAL index under the running import's mapping (SIGBUS, issue #18).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <QFileSystemModel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "gui/file_dialogs.h"
#include "gui_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

namespace {

// Whether another process sees a lock on the WAL index's "DMS" byte (offset 128), which every
// live connection holds and whose absence makes the next opener reinitialize (truncate) the file.
// F_GETLK never reports the asking process's own locks, hence the child.
bool walIndexOwnedSeenFromAnotherProcess(const QString& shm) {
  const QByteArray path = shm.toLocal8Bit();
  const pid_t child = fork();
  if (child == 0) {
    const int fd = ::open(path.constData(), O_RDONLY | O_CLOEXEC);
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    probe.l_start = 128;
    probe.l_len = 1;
    const bool ok = fd >= 0 && ::fcntl(fd, F_GETLK, &probe) == 0;
    _exit(!ok ? 2 : probe.l_type == F_UNLCK ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}

}  // namespace

class TestFileDialogs : public QObject {
  Q_OBJECT

 private slots:
  void browsingTheDatabaseFolderKeepsSqliteLocks() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString database = dir.filePath(QStringLiteral("fragscope.db"));
    // A writer in the middle of its work: the WAL and its index exist and are locked.
    storage::RunStore store(database.toStdString());
    test::addRun(store, "before", test::wavyTrace(2000, 1, false));
    const QString shm = database + QStringLiteral("-shm");
    QVERIFY(QFileInfo::exists(shm));
    QVERIFY(walIndexOwnedSeenFromAnotherProcess(shm));

    auto dialog =
        makeFileDialog(nullptr, QStringLiteral("Open"), dir.path(), QStringLiteral("All (*)"));
    auto* model = dialog->findChild<QFileSystemModel*>();
    QVERIFY(model != nullptr);
    dialog->show();
    // The type column is filled once the dialog's gatherer has looked at the file: that is
    // where Qt's default provider read it.
    QVERIFY(test::waitFor([&] {
      const QModelIndex index = model->index(shm);
      return index.isValid() && !model->type(index).isEmpty();
    }));
    QTest::qWait(100);
    QVERIFY2(walIndexOwnedSeenFromAnotherProcess(shm),
             "showing the folder dropped this process's lock on the WAL index");

    // And the database goes on: another process opens it while this one writes.
    const pid_t reader = fork();
    if (reader == 0) {
      try {
        storage::RunStore other(database.toStdString(), storage::OpenMode::read_only);
        _exit(other.list_runs().size() == 1 ? 0 : 1);
      } catch (...) {
        _exit(2);
      }
    }
    int status = 0;
    waitpid(reader, &status, 0);
    QCOMPARE(WEXITSTATUS(status), 0);
    test::addRun(store, "after", test::wavyTrace(2000, 2, false));
    QCOMPARE(store.list_runs().size(), std::size_t{2});
  }

  void typesComeFromNamesOnly() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString file = dir.filePath(QStringLiteral("unnamed"));
    QFile out(file);
    QVERIFY(out.open(QIODevice::WriteOnly));
    out.write("SQLite format 3");
    out.close();
    NameOnlyIconProvider provider;
    // By content this is an SQLite database; by name it is nothing in particular.
    QVERIFY(!provider.type(QFileInfo(file)).contains(QStringLiteral("SQLite")));
    QCOMPARE(provider.type(QFileInfo(dir.path())), QObject::tr("Folder"));
  }
};

QTEST_MAIN(TestFileDialogs)
#include "tst_file_dialogs.moc"
