#include "cli_process.h"

#include <QProcess>

#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>

namespace mosaic::test {

Run cli(const QStringList& args, const std::function<void()>& child) {
  QProcess p;
  if (child) p.setChildProcessModifier(child);
  p.start(QStringLiteral(MOSAIC_CLI), args);
  if (!p.waitForFinished(120000)) return {};
  return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

Run cli_on_small_disk(const QStringList& args, unsigned long long max_file_bytes) {
  return cli(args, [max_file_bytes] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{static_cast<rlim_t>(max_file_bytes), static_cast<rlim_t>(max_file_bytes)};
    ::setrlimit(RLIMIT_FSIZE, &limit);
  });
}

QString path(const std::filesystem::path& p) { return QString::fromStdString(p.string()); }

QStringList args(std::initializer_list<const char*> list) {
  QStringList out;
  for (const char* a : list) out << QString::fromUtf8(a);
  return out;
}

std::string integrity_check(const std::filesystem::path& db) {
  sqlite3* h = nullptr;
  std::string verdict = "cannot open";
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      verdict = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return verdict;
}

}  // namespace mosaic::test
