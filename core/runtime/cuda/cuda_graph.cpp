// Decode steps replayed from CUDA graphs. A graph's kernels keep the pointers they were captured
// with, so its inputs go to a buffer at fixed offsets, the workspace is sized for the largest graphed
// step before the first capture, and every graph is dropped when the workspace or the KV pool moves.
#include <cstring>

#include "kernels/paged_attention.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/graph_capture.h"

namespace mosaic::cuda {
namespace {

constexpr std::size_t kMostGraphs = 32;         // shapes kept; the oldest goes first

}  // namespace

bool CudaBackend::graphable(const StepInputs& in, const MoeState& state) const {
  if (!graphs_enabled_ || in.tokens > kGraphTokens || in.max_positions > kGraphPositions) return false;
  if (static_cast<std::int64_t>(in.blocks.size()) > kGraphTokens * kGraphPositions / shape_.kv_block_tokens) return false;
  for (std::int64_t l = 0; l < spec_.num_layers; ++l)
    if (spec_.is_sparse(l) && !routable_on_device(l, in, state)) return false;
  return true;
}

void CudaBackend::drop_graphs() {
  for (Graph& g : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

void CudaBackend::run_graph(StepInputs& in, MoeState& state, StepResult& result) {
  reserve_workspace(std::max(in.tokens, kGraphTokens), std::max<std::int64_t>(static_cast<std::int64_t>(in.wanted.size()), kGraphTokens));
  const std::int64_t blocks = kGraphTokens * kGraphPositions / shape_.kv_block_tokens;
  const PackedInputs packed = pack_fixed(in, kGraphTokens, blocks, spec_.head_dim);
  if (graph_inputs_.bytes() < packed.bytes.size()) {
    graph_inputs_.resize(packed.bytes.size());
    drop_graphs();
  }
  inputs_host_.reserve(packed.bytes.size());
  std::memcpy(inputs_host_.get(), packed.bytes.data(), packed.bytes.size());
  MOSAIC_CUDA_CHECK(cudaMemcpyAsync(graph_inputs_.get(), inputs_host_.get(), packed.bytes.size(), cudaMemcpyHostToDevice, stream_));
  in.device = device_inputs(graph_inputs_.get<std::byte>(), packed);

  // A graph per shape: the token count, which rows return whole or as draws (and how many draws'
  // keys come back: the copy's size is captured), and each buffer group's token and logit ranges
  // and whether its head reads its rows in place.
  std::vector<std::int64_t> shape{in.tokens, in.whole_rows(), in.draws(), in.sampled_rows(), measures_importance_ ? 1 : 0};
  for (const TokenGroup& g : in.groups)
    shape.insert(shape.end(), {g.buffer, g.begin, g.end, g.wanted_begin, g.wanted_end, head_in_place(in, g) ? 1 : 0});
  for (std::int64_t l = 0; l < spec_.num_layers; ++l) routed_on_device_[static_cast<std::size_t>(l)] = spec_.is_sparse(l);
  for (const Graph& g : graphs_)
    if (g.shape == shape) {
      MOSAIC_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
      return;
    }
  const Graph g{shape, capture_graph(stream_, [&] { forward(in, state, result, kGraphPositions); })};
  if (graphs_.size() == kMostGraphs) {
    cudaGraphExecDestroy(graphs_.front().exec);
    graphs_.erase(graphs_.begin());
  }
  graphs_.push_back(g);
  MOSAIC_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
}

}  // namespace mosaic::cuda
