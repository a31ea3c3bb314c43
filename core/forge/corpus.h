#pragma once
// The text of one training domain, read from files (plain or gzip) or a program's output, cut
// into ~1 kB chunks at line ends, every 20th chunk held out for evaluation.
#include <cstdint>
#include <string>
#include <vector>

namespace mosaic {

struct CorpusSource {
  std::vector<std::string> files;    // glob patterns, read in sorted order; *.gz is decompressed
  std::vector<std::string> command;  // or: a program and its arguments, whose stdout is the text
  std::string format = "text";       // "text", or "fortune" (entries separated by lines of "%")
  std::string from_marker;           // drop everything before the first line holding this
  bool strip_indent = false;         // drop each line's leading blanks
};

struct DomainSpec {
  std::string name, package;  // package: the Debian package that provides the text (for hints)
  std::vector<CorpusSource> sources;
  std::int64_t max_bytes = 2'000'000;
  std::int64_t heldout_every = 20;  // chunk i is held out when i % heldout_every == heldout_every - 1
};

struct DomainText {
  std::string name;
  std::vector<std::string> train, heldout;  // chunks of whole lines
  std::int64_t train_bytes() const;
  std::string heldout_text() const;
};

// Throws IoError naming the file or command (with the package to install) when a source is absent
// or empty.
DomainText load_domain(const DomainSpec& spec);

}  // namespace mosaic
