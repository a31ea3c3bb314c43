// A chat template (tokenizer_config.json's Jinja), rendered over a conversation with every role,
// list contents, tool calls and tools: refused or rendered with a typed error, never a crash, a
// hang or an unbounded allocation (the renderer's step, depth and size limits).
#include <nlohmann/json.hpp>

#include <string>

#include "fuzz_target.h"
#include "model/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "image"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "<tool_response>sunny</tool_response>"},
      {"role": "assistant", "content": "<think>ok</think>Sunny, 21.5 °C."},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "enable_thinking": false})");
  const std::string text(fuzz::as_text(data, size));
  const auto t = fuzz::accepted([&] { return ChatTemplate::parse(text, "chat_template", "<s>", "</s>"); });
  if (!t) return 0;
  fuzz::accepted([&] { return t->render_with(context); });
  fuzz::accepted([&] { return t->render(nlohmann::ordered_json::array(), false); });
  return 0;
}
