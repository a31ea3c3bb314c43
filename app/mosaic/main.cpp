// mosaic: the workbench. Opens a session file, or a family (variant folders, or a folder of them);
// by default the sample family's session from the shipped sample_configs/ (installed or in the
// source tree: common/install_paths.h), with the chat ready.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "common/install_paths.h"
#include "common/machine.h"
#include "runtime/threads.h"
#include "workbench/engine_host.h"
#include "workbench/family_panel.h"
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
                         "sample_configs/sample-session.json, installed under /usr/share/mosaic)\n", session_arg->c_str());
    return 2;
  }
  // Asked only for its version or help: answered without a display.
  for (int i = 1; i < argc && !has_display(); ++i)
    for (const char* flag : {"-v", "--version", "-h", "--help", "--help-all"})
      if (std::string(argv[i]) == flag) qputenv("QT_QPA_PLATFORM", "offscreen");
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
  QApplication::setApplicationVersion(QString::fromLatin1(mosaic::mosaic_version()));
  QApplication::setDesktopFileName(QStringLiteral("mosaic"));
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Serve many fine-tuned variants of one MoE model, and see how."));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("folders"), QStringLiteral("variant folders, a family folder, or a session file"));
  // Only for --help: the option itself was taken out of the arguments already (take_session).
  parser.addOption(QCommandLineOption(QStringLiteral("session"), QStringLiteral("open a session file (mosaic.session/1)"), QStringLiteral("file")));
  const QCommandLineOption quitAfterLoad(QStringLiteral("quit-after-load"),
                                         QStringLiteral("exit once the family has opened (status 0) or failed to (status 1): a smoke test"));
  parser.addOption(quitAfterLoad);
  parser.process(app);
  QString sessionFileArg;
  QStringList dirs = parser.positionalArguments();
  // A file where folders go is a session (a desktop's "Open with Mosaic" passes files as arguments).
  // One named .json that does not exist is a session path mistyped: said as such, not as a folder.
  if (!session_arg && dirs.size() == 1 && (QFileInfo(dirs.front()).isFile() || (!QFileInfo::exists(dirs.front()) && dirs.front().endsWith(QStringLiteral(".json")))))
    sessionFileArg = dirs.takeFirst();
  // Nothing named: the sample family's ready session (chat on the bible variant).
  const std::filesystem::path shipped = mosaic::shipped_data_dir();
  const QString samples = QString::fromStdString((shipped / "sample_configs").string());
  const QString sampleSession = samples + QStringLiteral("/sample-session.json");
  QString sessionFile = session_arg ? QString::fromStdString(*session_arg) : sessionFileArg;
  if (sessionFile.isEmpty() && dirs.isEmpty() && !shipped.empty() && QFileInfo::exists(sampleSession)) sessionFile = sampleSession;
  mosaic::configure_threads(0);
  mosaic::ui::MainWindow window;  // sized to fit the screen, or where it was left
  // The simulated clock's device profiles and routing models: those shipped beside the sample session.
  if (!shipped.empty()) {
    window.servingPanel()->setDeviceProfileDir(samples + QStringLiteral("/devices"));
    window.servingPanel()->setRoutingModelDir(samples + QStringLiteral("/routing"));
  }
  // What is opened and from where: --quit-after-load says it (the package's test checks the installed tree).
  const QString from = sessionFile.isEmpty() ? dirs.join(QStringLiteral(" ")) : QFileInfo(sessionFile).absoluteFilePath();
  if (parser.isSet(quitAfterLoad)) {
    if (sessionFile.isEmpty() && dirs.isEmpty()) {
      std::fprintf(stderr, "mosaic: nothing to open: no session or folders given, and no sample session was found "
                           "(set MOSAIC_DATA_DIR to the folder holding sample_configs/)\n");
      return 1;
    }
    QObject::connect(window.engine(), &mosaic::ui::EngineHost::familyOpened, &app, [from](const mosaic::ui::FamilyInfo& f) {
      std::printf("mosaic: opened %lld variants from %s\n", static_cast<long long>(f.variants.size()), qPrintable(from));
      QCoreApplication::exit(0);
    });
    QObject::connect(window.engine(), &mosaic::ui::EngineHost::familyFailed, &app, [](const QString& message) {
      std::fprintf(stderr, "mosaic: %s\n", qPrintable(message));
      QCoreApplication::exit(1);
    });
  }
  window.show();
  bool opening = true;
  if (!sessionFile.isEmpty()) opening = window.openSession(sessionFile);
  else if (!dirs.isEmpty()) opening = window.openFamily(dirs);
  if (!opening) {  // refused before the engine saw it: the reason the window shows, on stderr too
    const QString why = window.familyPanel()->errorText();
    std::fprintf(stderr, "mosaic: %s\n", qPrintable(why.isEmpty() ? from + QStringLiteral(" could not be opened") : why));
    if (parser.isSet(quitAfterLoad)) return 1;
  }
  return app.exec();
}
