// mosaic: the workbench. Opens a session file, or a family (variant folders, or a folder of them);
// by default the sample family's session from sample_configs/, with the chat ready.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "runtime/threads.h"
#include "workbench/main_window.h"
#include "workbench/serving_panel.h"

namespace {

// Qt aborts without a display; say how to run instead.
bool has_display() {
  for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

// `--session FILE`, `--session=FILE` (and `-session`), taken out of the arguments before Qt sees
// them: Qt's X11 platform would take `-session FILE` as its own session-management option.
std::optional<std::string> take_session(int& argc, char** argv) {
  std::optional<std::string> file;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--session" || a == "-session") && i + 1 < argc) {
      file = argv[++i];
    } else if (a.rfind("--session=", 0) == 0 || a.rfind("-session=", 0) == 0) {
      file = a.substr(a.find('=') + 1);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return file;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<std::string> session_arg = take_session(argc, argv);
  if (session_arg && !std::filesystem::is_regular_file(*session_arg)) {
    std::fprintf(stderr, "error: %s: the session file does not exist (save one with File → Save session, or see "
                         "sample_configs/sample-session.json)\n", session_arg->c_str());
    return 2;
  }
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
  // Only for --help: the option itself was taken out of the arguments already (take_session).
  parser.addOption(QCommandLineOption(QStringLiteral("session"), QStringLiteral("open a session file (mosaic.session/1)"), QStringLiteral("file")));
  parser.process(app);
  const QStringList dirs = parser.positionalArguments();
  // Nothing named: the sample family's ready session (chat on the bible variant).
  QString sessionFile = session_arg ? QString::fromStdString(*session_arg) : QString();
  if (sessionFile.isEmpty() && dirs.isEmpty() && QFileInfo::exists(QStringLiteral(MOSAIC_SAMPLE_SESSION))) sessionFile = QStringLiteral(MOSAIC_SAMPLE_SESSION);
  mosaic::configure_threads(0);
  mosaic::ui::MainWindow window;  // sized to fit the screen, or where it was left
  // The simulated clock's device profiles: those shipped beside the sample session.
  window.servingPanel()->setDeviceProfileDir(QFileInfo(QStringLiteral(MOSAIC_SAMPLE_SESSION)).absolutePath() + QStringLiteral("/devices"));
  window.servingPanel()->setRoutingModelDir(QFileInfo(QStringLiteral(MOSAIC_SAMPLE_SESSION)).absolutePath() + QStringLiteral("/routing"));
  window.show();
  if (!sessionFile.isEmpty()) window.openSession(sessionFile);
  else if (!dirs.isEmpty()) window.openFamily(dirs);
  return app.exec();
}
