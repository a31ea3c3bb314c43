#include "cli/output_paths.h"

#include <algorithm>
#include <optional>
#include <system_error>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/path_identity.h"
#include "common/json_text.h"
#include "common/text_file.h"
#include "model/variant_folders.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  const auto c = fs::weakly_canonical(fs::absolute(p), ec);  // through symlinks
  return ec ? fs::absolute(p).lexically_normal() : c;
}

bool within(const fs::path& inner, const fs::path& outer) {
  const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}

// The base_model folder an ESFT adapter folder names, or nullopt (not an adapter, or unreadable:
// the command itself reports that once it opens the folder).
std::optional<fs::path> adapter_base(const fs::path& dir) {
  const fs::path cfg = dir / "expert_cfg.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return std::nullopt;
  try {
    const auto j = parse_json_bounded(read_text_file(cfg), cfg.string());
    if (!j.is_object() || !j.contains("base_model") || !j["base_model"].is_string()) return std::nullopt;
    const fs::path base = j["base_model"].get<std::string>();
    return base.is_absolute() ? base : dir / base;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// What must not be written over: a family folder stands for its checkpoint folders (so a layout
// may be saved beside them), and an adapter brings in the base it is served over.
std::vector<fs::path> guarded(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> out;
  for (const fs::path& input : inputs) {
    if (input.empty()) continue;
    std::vector<fs::path> dirs{input};
    std::error_code ec;
    if (fs::is_directory(input, ec)) try {
        dirs.clear();
        for (const auto& [name, dir] : discover_variants({input})) dirs.push_back(dir);
      } catch (const Error&) {
        dirs = {input};
      }
    for (const fs::path& d : dirs) {
      out.push_back(d);
      if (const auto base = adapter_base(d)) out.push_back(*base);
    }
  }
  return out;
}

// What the path names may be replaced by this kind of output.
void check_kind(const fs::path& out, const std::string& flag, OutputKind kind) {
  std::error_code ec;
  const auto st = fs::status(out, ec);  // through links
  if (!fs::exists(st)) return;
  if (kind == OutputKind::Folder) {
    if (!fs::is_directory(st))
      throw InvalidArgument(flag, out.string(), "exists and is not a folder", "name a folder, or a path that does not exist yet");
    return;
  }
  try {
    const OutputPlace place = output_place(out);
    if (kind == OutputKind::Database && place.in_place)
      throw InvalidArgument(flag, out.string(), "is not a regular file: a record is an SQLite file, read and written in place",
                            "name a regular file, or a path that does not exist yet");
  } catch (const IoError& e) {
    throw InvalidArgument(flag, out.string(), e.problem(), e.hint());
  }
}

}  // namespace

void check_output(const fs::path& out, const std::string& flag, const std::vector<fs::path>& inputs, OutputKind kind) {
  if (out.empty()) return;
  // A file's path ending in '/' fails only once it is written, after the work ("x.json/" when x.json
  // exists passes every check below: nothing at that path exists).
  if (kind != OutputKind::Folder && !out.has_filename())
    throw InvalidArgument(flag, out.string(), "ends in '/', which names a folder, and this output is a file", "drop the '/' at the end");
  // "merged/" names the folder merged, not a file in it.
  const fs::path named = out.has_filename() ? out : out.parent_path();
  const fs::path folder = fs::absolute(named).parent_path();
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    throw InvalidArgument(flag, out.string(), "goes into " + folder.string() + ", which is not an existing folder",
                          "create the folder first, or write somewhere else");
  const auto target = resolved(out);
  for (const fs::path& input : guarded(inputs)) {
    const auto in = resolved(input);
    bool same = target == in || same_file(target, in);
    std::error_code ec;
    if (!same && fs::is_directory(in, ec) && fs::exists(target, ec))  // a hard link to a file of a checkpoint
      for (fs::directory_iterator it(in, ec), end; !ec && it != end && !same; it.increment(ec)) same = same_file(target, it->path());
    if (same || (fs::is_directory(in) && within(target, in)))
      throw InvalidArgument(flag, out.string(), same ? "is one of this command's inputs" : "lies inside the input folder " + input.string(),
                            "write the output somewhere else: it would overwrite what is read");
  }
  check_kind(out, flag, kind);  // after the inputs: "would overwrite what is read" says more
}

}  // namespace mosaic::cli
