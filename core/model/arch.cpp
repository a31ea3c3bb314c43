#include "model/arch.h"

#include <array>

namespace mosaic {
namespace {
// DeepSeek's defaults are transformers' (configuration_deepseek_v2.py / _v3.py): its configs write
// n_routed_experts; transformers 5 also reads num_experts (V2) and num_local_experts (V3).
constexpr std::array<ArchInfo, 6> kArchs{{
    {Arch::Mixtral, "mixtral", "block_sparse_moe.", "w1", "w3", "w2", QkNorm::None,
     /*always_norm_topk=*/true, /*shared=*/false, "", false, /*qkv_bias=*/false, /*latent=*/false, 1e-5, 1e6, 4096 * 32,
     "num_local_experts", "num_experts"},
    {Arch::Qwen2Moe, "qwen2_moe", "mlp.", "gate_proj", "up_proj", "down_proj", QkNorm::None, false,
     true, "mlp.shared_expert.", true, true, false, 1e-6, 10000.0, 32768, "num_experts", "num_local_experts"},
    {Arch::Qwen3Moe, "qwen3_moe", "mlp.", "gate_proj", "up_proj", "down_proj", QkNorm::PerHead, false,
     false, "", false, false, false, 1e-6, 10000.0, 32768, "num_experts", "num_local_experts"},
    {Arch::Olmoe, "olmoe", "mlp.", "gate_proj", "up_proj", "down_proj", QkNorm::Whole, false, false,
     "", false, false, false, 1e-5, 10000.0, 4096, "num_experts", "num_local_experts"},
    {Arch::DeepseekV2, "deepseek_v2", "mlp.", "gate_proj", "up_proj", "down_proj", QkNorm::None, false,
     true, "mlp.shared_experts.", false, false, true, 1e-6, 10000.0, 2048, "n_routed_experts", "num_experts"},
    {Arch::DeepseekV3, "deepseek_v3", "mlp.", "gate_proj", "up_proj", "down_proj", QkNorm::None, false,
     true, "mlp.shared_experts.", false, false, true, 1e-6, 10000.0, 4096, "n_routed_experts", "num_local_experts"},
}};
}  // namespace

const ArchInfo* find_arch(std::string_view model_type) {
  for (const ArchInfo& a : kArchs)
    if (a.model_type == model_type) return &a;
  return nullptr;
}
const ArchInfo& arch_info(Arch arch) { return kArchs[static_cast<std::size_t>(arch)]; }
std::span<const ArchInfo> supported_archs() { return kArchs; }

}  // namespace mosaic
