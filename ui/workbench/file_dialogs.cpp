#include "workbench/file_dialogs.h"

#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>

namespace mosaic::ui {

namespace {
const QString kKey = QStringLiteral("dialogs/lastFolder");
}

QString startFolder() {
  const QString last = QSettings().value(kKey).toString();
  if (!last.isEmpty() && QFileInfo(last).isDir()) return last;
  const QString documents = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
  return QFileInfo(documents).isDir() ? documents : QDir::homePath();
}

QString inStartFolder(const QString& name) { return QDir(startFolder()).filePath(name); }

QString remembered(const QString& path) {
  if (path.isEmpty()) return path;
  const QFileInfo f(path);
  QSettings().setValue(kKey, f.isDir() ? f.absoluteFilePath() : f.absolutePath());
  return path;
}

}  // namespace mosaic::ui
