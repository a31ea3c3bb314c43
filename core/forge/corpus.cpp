#include "forge/corpus.h"

#include <glob.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text_file.h"

namespace mosaic {
namespace {

constexpr std::size_t kChunkBytes = 1024;

std::string install_hint(const DomainSpec& d) {
  return d.package.empty() ? "check the recipe's sources" : "install it: apt-get install " + d.package + " (installer/setup-debian.sh does)";
}

std::string read_gzip(const std::string& path, const DomainSpec& d) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw IoError(path, "", "cannot be opened", install_hint(d));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  const bool bad = n < 0;
  gzclose(f);
  if (bad) throw IoError(path, "", "is not a readable gzip file");
  return out;
}

std::string read_file(const std::string& path, const DomainSpec& d) {
  if (path.size() > 3 && path.ends_with(".gz")) return read_gzip(path, d);
  return read_text_file(path, install_hint(d), UINTMAX_MAX);  // corpora are as large as they are
}

std::string quote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string run_command(const std::vector<std::string>& argv, const DomainSpec& d) {
  std::string line, shown;
  for (const auto& a : argv) {
    line += quote(a) + " ";
    shown += a + " ";
  }
  FILE* p = popen((line + "2>/dev/null").c_str(), "r");
  if (!p) throw IoError(shown, "", "cannot be started", install_hint(d));
  std::string out;
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (status != 0 || out.empty())
    throw IoError(shown, "", "failed or printed nothing (exit status " + std::to_string(status) + ")", install_hint(d));
  return out;
}

std::vector<std::string> expand(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

// Applies a source's options; returns its documents (a fortune each, or the whole text).
std::vector<std::string> documents(std::string text, const CorpusSource& s) {
  if (!s.from_marker.empty()) {
    const auto at = text.find(s.from_marker);
    text = at == std::string::npos ? std::string() : text.substr(text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1);
  }
  std::string cleaned;
  cleaned.reserve(text.size());
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> docs;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (s.strip_indent) line.erase(0, line.find_first_not_of(" \t") == std::string::npos ? line.size() : line.find_first_not_of(" \t"));
    if (s.format == "fortune" && line == "%") {  // the separator stays: it is the domain's style
      if (!cleaned.empty()) docs.push_back(std::move(cleaned) + "%\n");
      cleaned.clear();
      continue;
    }
    cleaned += line;
    cleaned += '\n';
  }
  if (!cleaned.empty()) docs.push_back(std::move(cleaned));
  return docs;
}

}  // namespace

std::int64_t DomainText::train_bytes() const {
  std::int64_t n = 0;
  for (const auto& c : train) n += static_cast<std::int64_t>(c.size());
  return n;
}

std::string DomainText::heldout_text() const {
  std::string s;
  for (const auto& c : heldout) s += c;
  return s;
}

DomainText load_domain(const DomainSpec& d) {
  std::vector<std::string> docs;
  std::int64_t total = 0;
  for (const CorpusSource& s : d.sources) {
    if (s.format != "text" && s.format != "fortune")
      throw InvalidArgument("domain " + d.name, "format", "'" + s.format + "' is neither text nor fortune");
    std::vector<std::string> texts;
    if (!s.command.empty()) texts.push_back(run_command(s.command, d));
    for (const std::string& pattern : s.files) {
      const auto paths = expand(pattern);
      if (paths.empty()) throw IoError(pattern, "", "matches no file", install_hint(d));
      for (const auto& p : paths) texts.push_back(read_file(p, d));
    }
    for (std::string& t : texts)
      for (std::string& doc : documents(std::move(t), s)) {
        if (total >= d.max_bytes) break;
        const auto room = static_cast<std::size_t>(d.max_bytes - total);
        if (doc.size() > room) {  // cut at the last line end within the budget
          const auto cut = doc.rfind('\n', room);
          doc.resize(cut == std::string::npos ? room : cut + 1);
        }
        total += static_cast<std::int64_t>(doc.size());
        docs.push_back(std::move(doc));
      }
  }
  if (total == 0) throw IoError("domain " + d.name, "", "has no text", install_hint(d));
  // Chunks of whole documents or, within a long one, whole lines.
  DomainText out;
  out.name = d.name;
  std::string chunk;
  std::int64_t index = 0;
  auto emit = [&] {
    if (chunk.empty()) return;
    (index++ % d.heldout_every == d.heldout_every - 1 ? out.heldout : out.train).push_back(std::move(chunk));
    chunk.clear();
  };
  for (const std::string& doc : docs) {
    std::size_t pos = 0;
    while (pos < doc.size()) {
      std::size_t end = doc.find('\n', pos);
      end = end == std::string::npos ? doc.size() : end + 1;
      chunk.append(doc, pos, end - pos);
      pos = end;
      if (chunk.size() >= kChunkBytes) emit();
    }
  }
  emit();
  return out;
}

}  // namespace mosaic
