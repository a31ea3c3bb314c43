#pragma once
// A step's chunks flattened into rows, as every backend lays them out (written once): tokens in
// chunk order, chunks of one resident-set buffer in runs (groups), and per token the reroute row,
// the caller's sequence, the engine's request and the position it has in its sequence.
#include <cstdint>
#include <vector>

#include "runtime/step.h"

namespace mosaic {

struct StepLayout {
  std::int64_t tokens = 0;
  std::vector<std::int64_t> offset;  // [chunks]: first token of each chunk
  struct Group {
    int buffer = 0;
    std::int64_t begin = 0, end = 0;              // tokens
    std::size_t first_chunk = 0, last_chunk = 0;  // [first, last)
  };
  std::vector<Group> groups;
  std::vector<int> row;                 // [tokens]: reroute row
  std::vector<int> sequence;            // [tokens]: the caller's sequence index
  std::vector<std::uint64_t> request;   // [tokens]: the engine's request id
  std::vector<std::int64_t> position;   // [tokens]: its place in its sequence
  std::vector<char> traced;             // [sequences]: its chunk asked for its routes
  std::vector<std::int64_t> first;      // [sequences]: its chunk's first token
  bool any_traced = false;
};

StepLayout lay_out(const StepBatch& batch);

}  // namespace mosaic
