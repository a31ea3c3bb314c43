#pragma once
// Where the workbench's file dialogs start: the folder last chosen in any of them, else the user's
// documents (never the working folder the program happened to start in).
#include <QString>

namespace mosaic::ui {

QString startFolder();
QString inStartFolder(const QString& name);  // a suggested file name there
// Remembers the folder of `path` (or `path` itself when it is a folder) for the next dialog; returns
// `path`, so that a dialog's result can be passed through.
QString remembered(const QString& path);

}  // namespace mosaic::ui
