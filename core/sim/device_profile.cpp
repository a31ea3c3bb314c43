#include "sim/device_profile.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_fields.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

DeviceProfile load_device_profile(const std::filesystem::path& path) {
  return parse_device_profile(read_text_file(path, "check the path of the device profile (sample_configs/devices/ has some)", 1u << 20),
                              path.string());
}

DeviceProfile parse_device_profile(const std::string& text, const std::string& file) {
  const std::string hint = "see sample_configs/devices/, or measure one with mosaic-cli bench-device";
  const auto j = parse_json(text, file, hint);
  if (!j.is_object()) throw FormatError(file, "", "is not a JSON object", hint);
  check_keys(j, {"schema", "name", "source", "h2d_pinned_gb_per_s", "h2d_pageable_gb_per_s", "memory_gb_per_s", "peak_tflops",
                 "compute_dtype", "launch_us", "row_us", "sync_us", "copy_setup_us"},
             file, "", hint);
  check_schema(j, "mosaic.device/1", file);
  DeviceProfile p;
  const JsonFields f(j, JsonFields::format_error(file, hint));
  // Rates must be positive (a zero bandwidth is an infinite copy); overheads may be zero.
  auto rate = [&](const char* key, double scale) { return f.number_from(key, 0, true) * scale; };
  auto overhead = [&](const char* key, double scale) { return f.number_from(key, 0, false) * scale; };
  p.name = f.text("name", true);
  p.source = f.text("source", true, std::string());
  p.h2d_pinned = rate("h2d_pinned_gb_per_s", 1e9);
  p.h2d_pageable = rate("h2d_pageable_gb_per_s", 1e9);
  p.memory_bandwidth = rate("memory_gb_per_s", 1e9);
  p.peak_flops = rate("peak_tflops", 1e12);
  p.launch_seconds = overhead("launch_us", 1e-6);
  p.sync_seconds = overhead("sync_us", 1e-6);
  if (f.has("row_us")) p.row_seconds = overhead("row_us", 1e-6);
  if (f.has("copy_setup_us")) p.copy_setup_seconds = overhead("copy_setup_us", 1e-6);
  const std::string dtype = f.text("compute_dtype", true, std::string("bf16"));
  if (dtype != "bf16" && dtype != "fp32")
    throw FormatError(file, "field 'compute_dtype'", "is '" + dtype + "'; use bf16 (the CUDA backend) or fp32 (the CPU backend)", hint);
  p.compute_bytes = dtype == "fp32" ? 4 : 2;
  return p;
}

std::string device_profile_json(const DeviceProfile& p) {
  nlohmann::ordered_json j = {{"schema", "mosaic.device/1"},
                              {"name", p.name},
                              {"source", p.source},
                              {"h2d_pinned_gb_per_s", p.h2d_pinned / 1e9},
                              {"h2d_pageable_gb_per_s", p.h2d_pageable / 1e9},
                              {"memory_gb_per_s", p.memory_bandwidth / 1e9},
                              {"peak_tflops", p.peak_flops / 1e12},
                              {"compute_dtype", p.compute_bytes == 4 ? "fp32" : "bf16"},
                              {"launch_us", p.launch_seconds / 1e-6},
                              {"row_us", p.row_seconds / 1e-6},
                              {"sync_us", p.sync_seconds / 1e-6},
                              {"copy_setup_us", p.copy_setup_seconds / 1e-6}};
  if (p.source.empty()) j.erase("source");
  if (p.row_seconds == 0) j.erase("row_us");
  if (p.copy_setup_seconds == 0) j.erase("copy_setup_us");
  return j.dump(2) + "\n";
}

}  // namespace mosaic
