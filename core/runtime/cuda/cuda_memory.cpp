// What the CUDA backend's memory grows to with the steps: KV blocks, the step workspace (sized for
// the largest step yet), and the reroute tables the device routes with.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/paged_attention.h"
#include "runtime/cuda/cuda_backend.h"

namespace mosaic::cuda {

void CudaBackend::reserve_kv(std::int64_t blocks) {
  if (blocks <= kv_blocks_) return;
  if (shape_.kv_blocks && blocks > *shape_.kv_blocks)
    throw InvalidArgument("step", "KV block " + std::to_string(blocks - 1),
                          "is beyond the " + std::to_string(*shape_.kv_blocks) + " blocks the budget holds");
  // Unlimited pools grow by doubling; a budgeted one is allocated whole at the start.
  const std::int64_t target = shape_.kv_blocks ? std::max(blocks, *shape_.kv_blocks) : std::max(blocks, 2 * kv_blocks_);
  // Latent attention caches one row of latent and rotary key per token, in k_ alone.
  const std::int64_t k_width = spec_.mla ? spec_.kv_cache_width() : spec_.kv_width(), v_width = spec_.mla ? 0 : spec_.kv_width();
  for (auto [pools, width] : {std::pair{&k_, k_width}, std::pair{&v_, v_width}})
    for (std::int64_t l = 0; l < spec_.num_layers && width > 0; ++l) {
      const auto row_bytes = static_cast<std::size_t>(width) * sizeof(bf16_t);
      const auto old_bytes = static_cast<std::size_t>(kv_blocks_ * shape_.kv_block_tokens) * row_bytes;
      DeviceBuffer grown(static_cast<std::size_t>(target * shape_.kv_block_tokens) * row_bytes);
      DeviceBuffer& old = (*pools)[static_cast<std::size_t>(l)];
      if (old_bytes) MOSAIC_CUDA_CHECK(cudaMemcpyAsync(grown.get(), old.get(), old_bytes, cudaMemcpyDeviceToDevice, stream_));
      MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
      old = std::move(grown);
    }
  kv_blocks_ = target;
  drop_graphs();
}

void CudaBackend::reserve_workspace(std::int64_t tokens, std::int64_t wanted) {
  if (tokens <= work_tokens_ && wanted <= work_wanted_) return;
  tokens = std::max(tokens, work_tokens_);
  wanted = std::max(wanted, work_wanted_);
  const ModelSpec& s = spec_;
  const std::int64_t T = tokens, P = tokens * s.top_k, H = s.hidden_size, I = s.expert_intermediate;
  const std::int64_t mlp_width = std::max({s.dense_intermediate, s.shared_expert_intermediate, std::int64_t(1)});
  std::size_t at = 0;
  std::vector<std::pair<void**, std::size_t>> parts;
  auto part = [&](auto** p, std::int64_t count, std::size_t elem) { parts.emplace_back(reinterpret_cast<void**>(p), static_cast<std::size_t>(count) * elem); };
  part(&work_.x, T * H, 4);
  part(&work_.h, T * H, 4);
  part(&work_.q, T * s.q_width(), 4);
  part(&work_.k, T * (s.mla ? s.kv_cache_width() : s.kv_width()), 4);  // MLA: kv_a_proj's output
  part(&work_.v, s.mla ? 1 : T * s.kv_width(), 4);
  part(&work_.attn, T * std::max(s.q_width(), s.o_width()), 4);
  const kernels::LatentShape latent = s.mla ? latent_shape(s) : kernels::LatentShape{};
  part(&work_.q_low, s.mla ? T * std::max<std::int64_t>(s.mla->q_lora_rank, 1) : 1, 4);
  part(&work_.latent_q, s.mla ? T * latent.heads * latent.row() : 1, 4);
  part(&work_.latent_out, s.mla ? T * latent.heads * latent.rank : 1, 4);
  part(&work_.mlp, T * 2 * mlp_width, 4);
  part(&work_.mlp2, std::max(T * std::max(mlp_width, H), P * I), 4);  // also a large group's activations
  part(&work_.gate, T, 4);
  part(&work_.router, T * std::max<std::int64_t>(s.num_experts, 1), 4);
  part(&work_.topk_w, P, 4);
  part(&work_.act, P * std::max<std::int64_t>(2 * I, 1), 4);  // a large group's gate_up output, then its activations
  part(&work_.pair_out, P * H, 4);
  part(&work_.gathered, store_.deltas() > 0 ? P * H : 1, 4);
  part(&work_.logits, wanted * s.vocab_size, 4);
  part(&work_.topk_ids, s.num_layers * P, 4);
  part(&work_.predicted_ids, P, 4);
  part(&work_.predicted_w, P, 4);
  part(&work_.unmasked_ids, P, 4);
  part(&work_.unmasked_w, P, 4);
  part(&work_.narrow, std::max({T * std::max({H, s.q_width(), s.o_width(), s.mla ? s.mla->q_lora_rank : 0, mlp_width}), P * std::max(H, I)}), 2);
  std::int64_t most_slots = shape_.scratch_slots;
  for (std::int64_t n : shape_.layer_slots) most_slots = std::max(most_slots, n);
  part(&work_.reroute_scratch, 2 * most_slots + 1, 4);
  part(&work_.groups.groups, 1, 4);
  part(&work_.groups.misses, 1, 4);
  part(&work_.groups.begin, P + 1, 4);
  part(&work_.groups.end, P + 1, 4);
  part(&work_.groups.weights, P + 1, sizeof(void*));
  part(&work_.groups.pair_at, P + 1, 4);
  part(&work_.groups.pos_of, P + 1, 4);
  part(&work_.group_counts, P + 1, 4);
  part(&work_.draws, 1, draw_layout(wanted).bytes);
  for (auto& [p, bytes] : parts) at += (bytes + 255) / 256 * 256;
  work_buffer_.resize(at);
  at = 0;
  for (auto& [p, bytes] : parts) {
    *p = work_buffer_.get<std::byte>() + at;
    at += (bytes + 255) / 256 * 256;
  }
  logits_host_.resize(static_cast<std::size_t>(wanted * s.vocab_size) * sizeof(float));
  ids_host_.resize(static_cast<std::size_t>(s.num_layers * P) * sizeof(std::int32_t));
  draws_host_.resize(draw_layout(wanted).bytes);
  predicted_host_.resize(static_cast<std::size_t>(P) * sizeof(std::int32_t));
  // A host plan's arrays: pair_at, pos_of, per wave counts, and per group begin, end, weights.
  plan_host_.resize(static_cast<std::size_t>(P + 1) * (4 * sizeof(std::int32_t) + sizeof(void*) + sizeof(std::int32_t)));
  work_tokens_ = tokens;
  work_wanted_ = wanted;
  drop_graphs();
}

void CudaBackend::upload_tables(const MoeState& moe) {
  for (std::size_t l = 0; l < tables_.size(); ++l)
    if (moe.tables[l]) upload_table(l, *moe.tables[l]);
}

void CudaBackend::upload_table(std::size_t layer, const RerouteTable& table) {
  const std::vector<std::int32_t>& data = table.data();
  if (data == uploaded_[layer]) return;
  uploaded_[layer] = data;
  MOSAIC_CUDA_CHECK(cudaMemcpyAsync(tables_[layer].get(), uploaded_[layer].data(), data.size() * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, stream_));
}

}  // namespace mosaic::cuda
