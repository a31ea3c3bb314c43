#pragma once
// `serve --allow-model-changes`: POST /v1/models and DELETE /v1/models/NAME carried out. A change is
// checked at once against the family as the queued changes will leave it (the folder opened with the
// others: typed errors the server answers 400), then run in order on a thread of its own: the family
// opened again with the folder added or removed, analysed (through the cache), planned under the same
// flags and budget, and its runtime built; the engine takes it between steps. A removed model is
// admitted no more and its requests finish first (cancelled after --grace).
//
// A change rebuilds the whole runtime: while the new one is built the old one still serves, so device
// memory (RAM on the CPU backend) holds both for that time, every pinned expert is copied again, and
// running requests are recomputed under the new runtime (their tokens do not change). Moving only
// the experts whose owner changed needs an incremental re-pin of the runtime; not built.
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/serving_args.h"
#include "server/http_server.h"

namespace mosaic::cli {

class FamilyChanges final : public server::ModelChanges {
 public:
  // `first`: what serve opened (its engine serves throughout; its family and store are let go once
  // a change has replaced them). `http` and `first` outlive this.
  FamilyChanges(ServingArgs args, ServingSession& first, server::HttpServer& http, bool chat_templates, double grace_seconds);
  ~FamilyChanges() override;  // the change in progress finishes; queued ones are dropped

  void add(const std::string& id, const std::filesystem::path& dir) override;
  void remove(const std::string& id) override;

 private:
  struct Change {
    bool add = false;
    std::string id;
    std::filesystem::path dir;
  };
  void run();
  void apply(const Change& c);

  ServingArgs args_;
  ServingSession& first_;
  server::HttpServer& http_;
  bool chat_templates_;
  double grace_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Change> queue_;
  std::vector<std::filesystem::path> dirs_;        // the family's folders once the queued changes are done
  std::vector<std::string> names_;                 // their variants' names, in the same order
  std::vector<std::filesystem::path> applied_;     // the folders being served (the worker's)
  std::shared_ptr<ServingSession> rebuilt_;        // whose runtime serves since a change rebuilt it (null: first_'s)
  bool stopping_ = false;
  std::thread worker_;                             // last: started once the rest is in place
};

}  // namespace mosaic::cli
