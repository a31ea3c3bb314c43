# The parsers of every file a user hands Mosaic, and what they need: no LibTorch, no sqlite, no Qt
# (PCRE2 for tokenizer.json's patterns, ICU for its Unicode normalizers).
# mosaic_core compiles them with the rest of the engine; the fuzz build (MOSAIC_FUZZ, tests/fuzz)
# compiles only these, with clang's libFuzzer instrumentation.
set(MOSAIC_FORMAT_SOURCES
  analysis/layout.cpp
  analysis/resident_set.cpp
  common/atomic_file.cpp
  common/byte_size.cpp
  common/edit_distance.cpp
  common/error.cpp
  common/json_fields.cpp
  common/json_text.cpp
  common/jsonl.cpp
  common/text_file.cpp
  model/arch.cpp
  model/chat_template.cpp
  model/bpe.cpp
  model/byte_level.cpp
  model/delta_codec.cpp
  model/delta_config.cpp
  model/delta_pack.cpp
  model/dtype.cpp
  model/esft_adapter.cpp
  model/jinja/parser.cpp
  model/jinja/python_text.cpp
  model/jinja/render.cpp
  model/mapped_file.cpp
  model/model_spec.cpp
  model/pre_tokenizer.cpp
  model/regex.cpp
  model/safetensors.cpp
  model/tokenizer.cpp
  model/unicode_form.cpp
  model/utf8.cpp
  serving/session_file.cpp
  serving/sweep.cpp
  serving/workload.cpp
  sim/device_profile.cpp
  sim/routing_model.cpp
  # what the parsers link against
  analysis/consolidation.cpp
  common/parallel.cpp
  common/sha256.cpp
  model/checkpoint.cpp
  model/content_hash.cpp
  model/dtype_convert.cpp
  model/family.cpp
  model/variant_folders.cpp
  model/weight_names.cpp
  runtime/miss_policy.cpp
  runtime/device_name.cpp
  runtime/policies.cpp
  runtime/slot_pool.cpp
  serving/strategy_names.cpp
)
list(TRANSFORM MOSAIC_FORMAT_SOURCES PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
