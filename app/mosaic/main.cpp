// mosaic: the workbench. Opens the given family (variant folders, or a folder of them), by default
// the sample family in resources/, with the chat ready.
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
  parser.addPositionalArgument(QStringLiteral("folders"), QStringLiteral("variant folders, or a family folder (default: the sample family)"));
  parser.process(app);
  QStringList dirs = parser.positionalArguments();
  if (dirs.isEmpty() && QFileInfo::exists(QStringLiteral(MOSAIC_SAMPLE_FAMILY))) dirs << QStringLiteral(MOSAIC_SAMPLE_FAMILY);
  mosaic::configure_threads(0);
  mosaic::ui::MainWindow window;
  window.resize(1400, 900);
  window.show();
  if (!dirs.isEmpty()) window.openFamily(dirs);
  return app.exec();
}
