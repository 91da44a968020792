#include "gui/file_dialogs.h"

#include <QFileInfo>
#include <QMimeDatabase>

namespace fragscope::gui {

QIcon NameOnlyIconProvider::icon(IconType type) const {
  return QAbstractFileIconProvider::icon(type);
}

QIcon NameOnlyIconProvider::icon(const QFileInfo& info) const {
  if (info.isDir())
    return QAbstractFileIconProvider::icon(IconType::Folder);
  const QMimeType mime = QMimeDatabase().mimeTypeForFile(info, QMimeDatabase::MatchExtension);
  const QIcon themed = QIcon::fromTheme(mime.iconName());
  return themed.isNull() ? QAbstractFileIconProvider::icon(IconType::File) : themed;
}

QString NameOnlyIconProvider::type(const QFileInfo& info) const {
  if (info.isDir())
    return QObject::tr("Folder");
  // MatchExtension: the default (MatchDefault) reads the file when its name does not decide.
  return QMimeDatabase().mimeTypeForFile(info, QMimeDatabase::MatchExtension).comment();
}

std::unique_ptr<QFileDialog> makeFileDialog(QWidget* parent, const QString& caption,
                                            const QString& directory, const QString& filter) {
  // One provider for the process: the dialog keeps a pointer and never owns it.
  static NameOnlyIconProvider provider;
  auto dialog = std::make_unique<QFileDialog>(parent, caption, directory, filter);
  dialog->setOption(QFileDialog::DontUseNativeDialog);
  dialog->setIconProvider(&provider);
  return dialog;
}

namespace {

QStringList run(QFileDialog& dialog) {
  return dialog.exec() == QDialog::Accepted ? dialog.selectedFiles() : QStringList();
}

}  // namespace

QString openFileName(QWidget* parent, const QString& caption, const QString& directory,
                     const QString& filter) {
  auto dialog = makeFileDialog(parent, caption, directory, filter);
  dialog->setFileMode(QFileDialog::ExistingFile);
  const QStringList files = run(*dialog);
  return files.isEmpty() ? QString() : files.front();
}

QStringList openFileNames(QWidget* parent, const QString& caption, const QString& directory,
                          const QString& filter) {
  auto dialog = makeFileDialog(parent, caption, directory, filter);
  dialog->setFileMode(QFileDialog::ExistingFiles);
  return run(*dialog);
}

QString saveFileName(QWidget* parent, const QString& caption, const QString& directory,
                     const QString& filter) {
  auto dialog = makeFileDialog(parent, caption, directory, filter);
  dialog->setAcceptMode(QFileDialog::AcceptSave);
  dialog->setFileMode(QFileDialog::AnyFile);
  const QStringList files = run(*dialog);
  return files.isEmpty() ? QString() : files.front();
}

}  // namespace fragscope::gui
