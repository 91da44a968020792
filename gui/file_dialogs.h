#pragma once
// Every file dialog of the application. Qt's own dialog asks, for every file in the folder it
// shows (hidden and filtered-out ones included), for the file's type; QMimeDatabase opens a file
// whose name does not tell (`fragscope.db-shm`, `fragscope.db`) to read its first bytes. Closing
// any descriptor of a file drops every POSIX lock this process holds on it, SQLite's included:
// the next process to open the database then finds its WAL index unowned, truncates it under
// this process's mapping, and the import running here died of SIGBUS in sqlite3WalFindFrame
// (issue #18). These dialogs tell a file's type by its name only, and never use the platform's
// dialog (GTK's, in this process, reads files the same way).
#include <QAbstractFileIconProvider>
#include <QFileDialog>
#include <QString>
#include <QStringList>
#include <memory>

class QWidget;

namespace fragscope::gui {

// Icons and type names from the file name alone: never opens a file.
class NameOnlyIconProvider : public QAbstractFileIconProvider {
 public:
  QIcon icon(IconType type) const override;
  QIcon icon(const QFileInfo& info) const override;
  QString type(const QFileInfo& info) const override;
};

// A non-native dialog with the name-only provider (the one the functions below show).
std::unique_ptr<QFileDialog> makeFileDialog(QWidget* parent, const QString& caption,
                                            const QString& directory, const QString& filter);

// Like QFileDialog's static functions; an empty result means cancelled.
QString openFileName(QWidget* parent, const QString& caption, const QString& directory,
                     const QString& filter);
QStringList openFileNames(QWidget* parent, const QString& caption, const QString& directory,
                          const QString& filter);
QString saveFileName(QWidget* parent, const QString& caption, const QString& directory,
                     const QString& filter);

}  // namespace fragscope::gui
