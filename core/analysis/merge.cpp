#include "analysis/merge.h"

#include "analysis/checkpoint_folder.h"
#include "common/error.h"
#include "model/dtype_convert.h"
#include "model/safetensors.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

constexpr std::size_t kMergeChunk = 1 << 16;  // elements converted per step

std::vector<TensorEntry> entries_of(const Checkpoint& ck) {
  std::vector<TensorEntry> entries;
  for (const Weight& w : ck.weights()) entries.push_back({w.expected.name, w.dtype, w.expected.shape});
  return entries;
}

// `w` of `ck` in `dtype`: its mapped bytes when they are what it means in that dtype, else converted
// (a delta folder's expert: base + Δ̂) into `scratch`.
std::span<const std::byte> as_dtype(const Checkpoint& ck, const Weight& w, DType dtype, std::vector<std::byte>& scratch) {
  const WeightFloats floats(ck, w);
  if (w.dtype == dtype && floats.is_stored()) return w.data();
  const std::size_t numel = floats.size();
  scratch.resize(numel * dtype_size(dtype));
  std::vector<float> buf(kMergeChunk);
  for (std::size_t off = 0; off < numel; off += kMergeChunk) {
    const std::span<float> part(buf.data(), std::min(kMergeChunk, numel - off));
    floats.read(off, part);
    from_float(dtype, part, scratch.data() + off * dtype_size(dtype));
  }
  return scratch;
}

}  // namespace

void write_averaged(const Family& family, const fs::path& out) {
  if (family.empty()) throw InvalidArgument("averaging", "variants", "none given", "give at least one variant");
  const Checkpoint& first = *family.variants().front().checkpoint;
  const auto entries = entries_of(first);
  std::vector<std::byte> result;
  std::vector<float> part(kMergeChunk);
  std::vector<double> sum(kMergeChunk);
  write_checkpoint_folder(out, first.dir(), entries, [&](std::size_t i) {
    const Weight& w0 = first.weights()[i];
    const auto numel = static_cast<std::size_t>(w0.info->numel());
    result.resize(numel * dtype_size(w0.dtype));
    std::vector<WeightFloats> floats;
    for (const Variant& v : family.variants()) floats.emplace_back(*v.checkpoint, v.checkpoint->weights()[i]);
    for (std::size_t off = 0; off < numel; off += kMergeChunk) {
      const std::size_t len = std::min(kMergeChunk, numel - off);
      std::fill_n(sum.begin(), len, 0.0);
      for (const WeightFloats& w : floats) {
        w.read(off, std::span(part.data(), len));
        for (std::size_t k = 0; k < len; ++k) sum[k] += part[k];
      }
      for (std::size_t k = 0; k < len; ++k) part[k] = static_cast<float>(sum[k] / static_cast<double>(family.size()));
      from_float(w0.dtype, std::span(part.data(), len), result.data() + off * dtype_size(w0.dtype));
    }
    return std::span<const std::byte>(result);
  });
}

void write_consolidated(const Family& family, const Layout& layout, const std::string& target, const fs::path& out) {
  const Variant* t = family.find(target);
  if (!t)
    throw InvalidArgument("consolidated merge", "target '" + target + "'", "is not one of the variants given",
                          "name the target by its variant name");
  const ConsolidationPlan& plan = layout.plan;
  const Checkpoint& own = *t->checkpoint;
  std::vector<std::byte> scratch;
  write_checkpoint_folder(out, own.dir(), entries_of(own), [&](std::size_t i) {
    const Weight& w = own.weights()[i];
    const ExpectedTensor& x = w.expected;
    if (!x.is_expert()) return w.data();
    const int resident = plan.resident(x.layer, x.expert);
    if (resident < 0) return as_dtype(own, w, w.dtype, scratch);
    const Variant* holder = family.find(layout.variants.at(static_cast<std::size_t>(resident)).name);
    if (!holder)
      throw MismatchError("layout", "variant '" + layout.variants[static_cast<std::size_t>(resident)].name + "'",
                          "is not among the variants given", "give the variants the layout was made for");
    return as_dtype(*holder->checkpoint, holder->checkpoint->weight(x.name), w.dtype, scratch);
  });
}

}  // namespace mosaic
