#pragma once
// Runs a forge recipe: corpora → byte-level BPE tokenizer → base model → one full fine-tune and
// one ESFT adapter per domain → held-out texts and a summary (forge.json) in the output folder.
// Resumable: finished stages are skipped, an interrupted one continues from its last saved state.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "forge/recipe.h"

namespace mosaic {

struct ForgeOptions {
  std::int64_t step_limit = -1;              // ≥ 0: stop each stage after this many steps (tests)
  const std::atomic<bool>* stop = nullptr;   // set: save the state and return at the next step
};

using ForgeLog = std::function<void(const std::string& line)>;

// Throws MismatchError when work_dir holds a run of a different recipe, and what the parts throw
// (IoError for a missing corpus, naming the Debian package to install).
void run_forge(const ForgeRecipe& recipe, const ForgeLog& log, const ForgeOptions& options = {});

}  // namespace mosaic
