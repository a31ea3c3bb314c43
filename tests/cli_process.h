#pragma once
// Runs the real mosaic-cli binary as a user does, for the suites that test it end to end.
#include <QString>
#include <QStringList>

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>

namespace mosaic::test {

struct Run {
  int code = -1;  // -1: did not start, or still running after two minutes
  QString out, err;
};

// `child` runs in the child between fork and exec (limits, another user).
Run cli(const QStringList& args, const std::function<void()>& child = {});
// The same with the child's files limited to `max_file_bytes` (RLIMIT_FSIZE, its signal ignored so
// that writes fail with EFBIG): a disk that fills while the command runs.
Run cli_on_small_disk(const QStringList& args, unsigned long long max_file_bytes);

QString path(const std::filesystem::path& p);
QStringList args(std::initializer_list<const char*> list);

// SQLite's `PRAGMA integrity_check` verdict on the file, read-only ("ok" when intact).
std::string integrity_check(const std::filesystem::path& db);

}  // namespace mosaic::test
