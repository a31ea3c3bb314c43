#pragma once
// DeltaMoE's serving claim, measured (bench_deltas.cpp): a family served as delta folders over its
// base against the same family as full variants, under the same device budget.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "runtime/runtime.h"

namespace mosaic::cli {

struct DeltaServing {
  Device device = Device::Cpu;
  std::vector<int> batches{1, 32};  // sequences a step; 1: one request at a time
  int reps = 2;                     // the best of these, taken in turns
  std::int64_t prompt = 16, decode = 32;
};

// Writes a delta folder (4-bit 2:4, group 128) over `base` for each of `variants` into `dir`, then
// serves, at each batch size, requests spread over the variants three ways: the delta folders with
// the base's experts and every delta resident; the full variants with every expert resident; the
// full variants under the first way's device bytes (pinned while room, the rest missed, lru). Prints
// the table; returns its rows.
nlohmann::ordered_json deltas_against_variants(const std::filesystem::path& dir, const std::filesystem::path& base,
                                               const std::vector<std::filesystem::path>& variants, const DeltaServing& how);

}  // namespace mosaic::cli
