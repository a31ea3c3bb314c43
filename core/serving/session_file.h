#pragma once
// A workbench session (mosaic.session/1 JSON): the family's variant folders, the budget and policy
// (or a layout file) and the reserve planned with, the device it is served on, the serving panel's sweep settings and the chat's target, prompt and sampling settings — so a
// person reopens exactly what they were looking at. Relative paths are relative to the file.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/capacity.h"
#include "runtime/device.h"

namespace mosaic {

struct SessionFile {
  static constexpr const char* kSchema = "mosaic.session/1";
  std::vector<std::filesystem::path> variants;
  std::optional<std::uint64_t> budget_bytes;  // nullopt: the engine's default
  std::optional<std::uint64_t> host_budget_bytes;  // the host tier's budget; nullopt: every weight in RAM
  std::string policy = "round-robin";
  std::vector<double> shares;  // the weighted policy's, one per variant; empty: alike
  std::filesystem::path layout;  // empty: plan from the budget
  std::optional<ReserveSpec> reserve;  // what the budget keeps beside the experts; nullopt: defaults
  Device device = Device::Cpu;         // what the family is served on (the workbench's "Serve on")
  CpuWeights cpu_weights = CpuWeights::Stored;  // how the CPU backend holds weights (the workbench's "CPU weights")
  std::string serving_json;      // a mosaic.sweep/1 object without variants, or empty
  std::string chat_target, chat_prompt;
  std::optional<int> chat_max_new_tokens;               // nullopt: the workbench's default
  std::optional<double> chat_temperature, chat_top_p;
};

// Throws IoError, FormatError naming the field, UnsupportedError for another schema.
SessionFile load_session_file(const std::filesystem::path& path);
// The same from the file's text; `file` names it in errors, relative paths resolve against `base_dir`.
SessionFile parse_session_file(std::string_view text, const std::string& file, const std::filesystem::path& base_dir);
// Atomic; paths under the file's folder are written relative to it.
void save_session_file(const std::filesystem::path& path, const SessionFile& session);

}  // namespace mosaic
