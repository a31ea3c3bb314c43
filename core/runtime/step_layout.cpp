#include "runtime/step_layout.h"

namespace mosaic {

StepLayout lay_out(const StepBatch& batch) {
  StepLayout out;
  out.traced.assign(static_cast<std::size_t>(batch.sequences), 0);
  out.first.assign(static_cast<std::size_t>(batch.sequences), 0);
  for (std::size_t c = 0; c < batch.chunks.size(); ++c) {
    const StepChunk& chunk = batch.chunks[c];
    out.traced[static_cast<std::size_t>(chunk.sequence)] = chunk.trace;
    out.first[static_cast<std::size_t>(chunk.sequence)] = out.tokens;
    out.any_traced = out.any_traced || chunk.trace;
    out.offset.push_back(out.tokens);
    if (out.groups.empty() || out.groups.back().buffer != chunk.buffer) out.groups.push_back({chunk.buffer, out.tokens, out.tokens, c, c});
    const auto n = static_cast<std::int64_t>(chunk.tokens.size());
    out.tokens += n;
    out.groups.back().end = out.tokens;
    out.groups.back().last_chunk = c + 1;
    out.row.insert(out.row.end(), static_cast<std::size_t>(n), chunk.target);
    out.sequence.insert(out.sequence.end(), static_cast<std::size_t>(n), chunk.sequence);
    out.request.insert(out.request.end(), static_cast<std::size_t>(n), chunk.request);
    for (std::int64_t i = 0; i < n; ++i) out.position.push_back(chunk.start + i);
  }
  return out;
}

}  // namespace mosaic
