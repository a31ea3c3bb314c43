#pragma once
// A variant's weights resident for the CPU reference backend, converted to fp32 from whatever the
// checkpoint stores. Immutable once loaded: one Model may serve many KvCaches on many threads.
#include <memory>

#include "model/checkpoint.h"

namespace mosaic {

struct ModelWeights;  // runtime/cpu_weights.h, for the backend's own translation units

class Model {
 public:
  static std::unique_ptr<Model> load(const Checkpoint& checkpoint);
  ~Model();

  const ModelSpec& spec() const { return spec_; }
  const ModelWeights& weights() const { return *weights_; }

 private:
  Model(ModelSpec spec, std::unique_ptr<ModelWeights> weights);
  ModelSpec spec_;
  std::unique_ptr<ModelWeights> weights_;
};

}  // namespace mosaic
