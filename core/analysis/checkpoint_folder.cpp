#include "analysis/checkpoint_folder.h"

#include <unistd.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "model/delta_config.h"
#include "model/esft_adapter.h"

namespace fs = std::filesystem;

namespace mosaic {

void write_checkpoint_folder(const fs::path& out, const fs::path& source, const std::vector<TensorEntry>& entries, const TensorSource& tensors,
                             const std::map<std::string, std::string>& metadata, const std::map<std::string, std::string>& extra_files) {
  std::error_code ec;
  if (fs::exists(out, ec) && (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    throw InvalidArgument(out.string(), "", "already exists and is not an empty folder", "choose a new output folder or remove this one");
  fs::path tmp = out;
  tmp += ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw IoError(tmp.string(), "", "cannot create folder: " + ec.message(), "check that the parent folder is writable");
  try {
    for (const auto& f : fs::directory_iterator(source)) {
      const std::string name = f.path().filename().string();
      // What is written is a checkpoint of its own: an adapter's or a delta's description would
      // make it one again.
      if (!f.is_regular_file() || name.ends_with(".safetensors") || name == "model.safetensors.index.json" || name == kExpertCfgFile ||
          name == kDeltaCfgFile)
        continue;
      fs::copy_file(f.path(), tmp / name, ec);
      if (ec) throw IoError((tmp / name).string(), "", "cannot copy from " + f.path().string() + ": " + ec.message());
    }
    for (const auto& [name, text] : extra_files) write_file_atomically(tmp / name, [&](std::ostream& o) { o << text; });
    write_safetensors(tmp / "model.safetensors", entries, tensors, metadata);
    if (fs::exists(out, ec)) fs::remove(out, ec);  // an empty folder
    fs::rename(tmp, out, ec);
    if (ec) throw IoError(out.string(), "", "cannot move the finished checkpoint into place: " + ec.message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace mosaic
