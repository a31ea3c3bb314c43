#pragma once
// OpenAI's `stop`: strings that end a generation where they first appear in its text, themselves
// left out. Text is handed out as it streams, except a tail that may still become a stop string.
#include <string>
#include <string_view>
#include <vector>

namespace mosaic::server {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Takes the next piece of generated text and returns what may be shown now. Once a stop string
  // has appeared, stopped() is true and nothing after it is ever returned.
  std::string push(std::string_view piece);
  // What was held back when the generation ends without a stop string.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // received, not yet shown
  bool stopped_ = false;
};

}  // namespace mosaic::server
