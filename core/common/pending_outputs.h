#pragma once
// Paths a command is still writing — the temporaries of atomic writes and staged folders, a record no
// run has reached yet — which must not outlive it when it is interrupted (Ctrl-C, SIGTERM): a front
// end that catches those signals removes them before it exits. Registered for as long as a
// PendingOutput lives. Thread-safe.
#include <filesystem>

namespace mosaic {

class PendingOutput {
 public:
  explicit PendingOutput(std::filesystem::path path);  // a file or a folder
  ~PendingOutput();
  PendingOutput(const PendingOutput&) = delete;
  PendingOutput& operator=(const PendingOutput&) = delete;

 private:
  std::filesystem::path path_;
};

// Removes every path registered now (folders with what they hold); what it removed, for a message.
std::size_t discard_pending_outputs();

}  // namespace mosaic
