#pragma once
// OpenAI's `stop`: strings that end a generation where they first appear in its text, themselves
// left out. Text is handed out as it streams, except a tail that may still become a stop string.
//
// "First appear" means first to be complete: the generation ends at the character that completes a
// stop string (the engine cannot wait to see whether a longer one would have begun earlier), and the
// text is cut where that string starts; of strings completed by the same character, the longest
// counts. The result does not depend on how the text is cut into pieces, and costs time linear in
// its length (one Knuth-Morris-Pratt automaton per stop string), whatever the strings are.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mosaic::server {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);

  // Takes the next piece of generated text and returns what may be shown now. Once a stop string
  // has appeared, stopped() is true and nothing after it is ever returned.
  std::string push(std::string_view piece);
  // What was held back when the generation ends without a stop string.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  struct Matcher {
    std::string text;
    std::vector<std::size_t> border;  // border[i]: longest proper prefix of text[0..i] that is also its suffix
    std::size_t matched = 0;          // longest prefix of text that ends the text seen so far
  };
  std::vector<Matcher> stops_;
  std::string pending_;  // received, not yet shown: always the longest matched prefix, at most
  bool stopped_ = false;
};

}  // namespace mosaic::server
