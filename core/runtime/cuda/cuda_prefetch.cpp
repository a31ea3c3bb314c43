// The prefetch policy on CUDA: while a MoE layer's experts compute, the next MoE layer's likely
// experts come in on the copy stream. The next layer's router runs over this layer's input h (the
// residual stream changes little from one layer to the next, so its top-k predicts the next
// layer's); the host plans the loads with the predicted ids it reads back in the same wait as this
// layer's own top-k, and the next layer's experts wait on the copies' event, not on the host.
#include <chrono>
#include <stdexcept>

#include "kernels/router_topk.h"
#include "runtime/cuda/cuda_backend.h"

namespace mosaic::cuda {

void CudaBackend::predict(std::int64_t next, const StepInputs& in) {
  const std::int64_t T = in.tokens, E = spec_.num_experts, k = spec_.top_k, H = spec_.hidden_size;
  Workspace& w = work_;
  // w.router is free again: this layer's top-k has been taken from it.
  for (const TokenGroup& g : in.groups)
    linear(w.h + g.begin * H, g.end - g.begin, H, weight(g.buffer, layout_.layers[static_cast<std::size_t>(next)].router), E, nullptr,
           false, w.router + g.begin * E);
  choose_experts(next, in, /*masks=*/false, w.predicted_ids, w.predicted_w);
  MOSAIC_CUDA_CHECK(cudaMemcpyAsync(predicted_host_.get(), w.predicted_ids, static_cast<std::size_t>(T * k) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::prefetch(std::int64_t next, const StepInputs& in, MoeState& state, StepResult& result) {
  const auto n = static_cast<std::size_t>(next);
  const std::int64_t k = spec_.top_k, P = in.tokens * k;
  const std::int32_t* ids = predicted_host_.get<std::int32_t>();  // the caller has waited for the stream
  const std::vector<std::int64_t> predicted(ids, ids + P);
  const std::vector<int> rows(in.rows.begin(), in.rows.end());
  const std::vector<ExpertLoad> loads =
      plan_prefetch({next, *state.tables[n], *state.pools[n], *state.scratch, *state.store, *state.policy, state.recent}, predicted, k, rows);
  if (loads.empty()) return;
  if (prefetch_layer_ >= 0) throw std::logic_error("a prefetch issued before the one in flight was awaited");
  // No wait for the compute stream: only `next`'s kernels read its slots, and this step has not run
  // them yet (the last step's ended with the stream synchronized). So the copies start at once, under
  // this layer's expert compute.
  prefetch_pairs_.clear();
  for (const ExpertLoad& load : loads) {
    LayerCounts& c = result.counts[static_cast<std::size_t>(in.sequence[static_cast<std::size_t>(load.pair / k)])][n];
    ++c.prefetches;
    c.prefetch_bytes += issue_expert_copy(next, load.slot, load.content).bytes;
    prefetch_pairs_.push_back(load.pair);
  }
  MOSAIC_CUDA_CHECK(cudaEventRecord(prefetched_, copy_));
  prefetch_layer_ = next;
  upload_table(next, *state.tables[n]);  // the next layer may now route on the device
}

void CudaBackend::await_prefetch(std::int64_t layer, const StepInputs& in, StepResult& result, bool host_waited) {
  if (prefetch_layer_ != layer) return;
  prefetch_layer_ = -1;
  if (!host_waited) {  // the layer routes on the device: its kernels wait, the host goes on
    MOSAIC_CUDA_CHECK(cudaStreamWaitEvent(stream_, prefetched_, 0));
    return;
  }
  // The host has just waited for the layer's top-k, so what it waits for now is what the copies
  // did not hide behind this layer's attention and the layer before's experts.
  const auto t0 = std::chrono::steady_clock::now();
  MOSAIC_CUDA_CHECK(cudaEventSynchronize(prefetched_));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::int64_t k = spec_.top_k;
  for (std::int64_t pair : prefetch_pairs_)
    result.counts[static_cast<std::size_t>(in.sequence[static_cast<std::size_t>(pair / k)])][static_cast<std::size_t>(layer)].prefetch_seconds +=
        seconds / static_cast<double>(prefetch_pairs_.size());
}

}  // namespace mosaic::cuda
