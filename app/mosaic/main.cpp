// mosaic: the workbench. Opens a session file, or a family (variant folders, or a folder of them);
// by default the sample family's session from sample_configs/, with the chat ready.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>

#include <cstdio>
#include <cstdlib>

#include "runtime/threads.h"
#include "workbench/main_window.h"

namespace {

// Qt aborts without a display; say how to run instead.
bool has_display() {
  for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!has_display()) {
    std::fprintf(stderr,
                 "mosaic: no display (neither DISPLAY nor WAYLAND_DISPLAY is set).\n"
                 "  On a machine without one, run the workbench under a virtual display:\n"
                 "    xvfb-run -a -s \"-screen 0 1600x1000x24\" %s\n"
                 "  or check it headless with QT_QPA_PLATFORM=offscreen. Everything the engine does is also\n"
                 "  in mosaic-cli (inspect, analyze, consolidate, generate --prompt, bench, eval, report, forge).\n",
                 argv[0]);
    return 2;
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("Mosaic"));
  QApplication::setApplicationName(QStringLiteral("Mosaic workbench"));
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Serve many fine-tuned variants of one MoE model, and see how."));
  parser.addHelpOption();
  parser.addPositionalArgument(QStringLiteral("folders"), QStringLiteral("variant folders, or a family folder"));
  const QCommandLineOption session(QStringLiteral("session"), QStringLiteral("open a session file (mosaic.session/1)"), QStringLiteral("file"));
  parser.addOption(session);
  parser.process(app);
  const QStringList dirs = parser.positionalArguments();
  // Nothing named: the sample family's ready session (chat on the bible variant).
  QString sessionFile = parser.value(session);
  if (sessionFile.isEmpty() && dirs.isEmpty() && QFileInfo::exists(QStringLiteral(MOSAIC_SAMPLE_SESSION))) sessionFile = QStringLiteral(MOSAIC_SAMPLE_SESSION);
  mosaic::configure_threads(0);
  mosaic::ui::MainWindow window;
  window.resize(1400, 900);
  window.show();
  if (!sessionFile.isEmpty()) window.openSession(sessionFile);
  else if (!dirs.isEmpty()) window.openFamily(dirs);
  return app.exec();
}
