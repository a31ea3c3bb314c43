#include "cli/model_changes.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "common/error.h"
#include "model/family.h"
#include "model/variant_folders.h"
#include "server/served_models.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

FamilyChanges::FamilyChanges(ServingArgs args, ServingSession& first, server::HttpServer& http, bool chat_templates, double grace_seconds)
    : args_(std::move(args)), first_(first), http_(http), chat_templates_(chat_templates), grace_(grace_seconds) {
  if (!args_.model.empty() || !args_.layout.empty() || (args_.capacity < 0 && args_.budget.empty()))
    throw InvalidArgument("--allow-model-changes", "", "re-plans the layout for each new family, so it needs one planned here",
                          "serve --variants … with --capacity N or --budget B (not --model, not --layout)");
  for (const auto& [name, dir] : discover_variants(args_.variants)) {
    names_.push_back(name);
    dirs_.push_back(dir);
  }
  applied_ = dirs_;
  worker_ = std::thread([this] { run(); });
}

FamilyChanges::~FamilyChanges() {
  {
    std::lock_guard lock(m_);
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  worker_.join();
}

void FamilyChanges::add(const std::string& id, const fs::path& dir) {
  std::lock_guard lock(m_);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw MissingError(dir.string(), "", fs::exists(dir, ec) ? "is a file, not a folder" : "does not exist on the server's machine",
                       "give the path of a variant, adapter or delta folder on the server's machine");
  const auto found = discover_variants({dir});
  if (found.size() != 1)
    throw InvalidArgument("path", dir.string(), "holds " + std::to_string(found.size()) + " variants", "add one folder holding config.json at a time");
  if (found.front().first != id)
    throw InvalidArgument("id", "'" + id + "'", "is not the folder's name: a model is named by its folder ('" + found.front().first + "')",
                          "send \"id\": \"" + found.front().first + "\"");
  if (std::find(names_.begin(), names_.end(), id) != names_.end())
    throw InvalidArgument("id", "'" + id + "'", "is in the family already", "remove it first, or add another");
  // Opened with the others now, so that what does not fit (another architecture, a base that is not
  // served, a broken checkpoint) is answered at once.
  std::vector<fs::path> dirs = dirs_;
  dirs.push_back(fs::absolute(dir));
  Family check;
  open_family(check, dirs);
  dirs_ = std::move(dirs);
  names_.push_back(id);
  queue_.push_back({true, id, dirs_.back()});
  http_.set_model_state(id, {"queued", "waiting for the changes before it"});
  cv_.notify_all();
}

void FamilyChanges::remove(const std::string& id) {
  std::lock_guard lock(m_);
  const auto it = std::find(names_.begin(), names_.end(), id);
  if (it == names_.end())
    throw InvalidArgument("model", "'" + id + "'", "is served as the base of an adapter, not as a folder of its own", "remove its adapters first");
  const auto i = static_cast<std::size_t>(it - names_.begin());
  names_.erase(it);
  dirs_.erase(dirs_.begin() + static_cast<std::ptrdiff_t>(i));
  queue_.push_back({false, id, {}});
  cv_.notify_all();
}

void FamilyChanges::run() {
  for (;;) {
    Change c;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      c = queue_.front();
      queue_.pop_front();
    }
    try {
      apply(c);
    } catch (const std::exception& e) {
      // The family stays as it was served; the folder is dropped from what later changes build on.
      std::cerr << "serve: " << (c.add ? "adding '" : "removing '") << c.id << "' failed: " << e.what() << "\n";
      http_.set_model_state(c.id, {"failed", e.what()});
      std::lock_guard lock(m_);
      if (c.add) {
        const auto it = std::find(names_.begin(), names_.end(), c.id);
        if (it != names_.end()) {
          dirs_.erase(dirs_.begin() + (it - names_.begin()));
          names_.erase(it);
        }
      }
    }
  }
}

void FamilyChanges::apply(const Change& c) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<fs::path> dirs = applied_;
  if (c.add) {
    http_.set_model_state(c.id, {"loading", "hashing, analysing and planning the family with it"});
    dirs.push_back(c.dir);
  } else {
    const int cancelled = http_.withdraw(c.id, grace_);
    if (cancelled > 0) std::cerr << "serve: removing '" << c.id << "': " << cancelled << " of its requests cancelled after " << grace_ << " s\n";
    http_.set_model_state(c.id, {"removing", "planning the family without it"});
    const auto found = discover_variants(dirs);
    for (std::size_t i = 0; i < found.size(); ++i)
      if (found[i].first == c.id) dirs.erase(dirs.begin() + static_cast<std::ptrdiff_t>(i));
  }
  std::shared_ptr<Runtime> serving = first_.engine->runtime();
  ServingArgs args = args_;
  args.variants = dirs;
  args.layer_slots = serving->pinned_slots();  // the layout re-planned into the slots the runtime holds
  std::shared_ptr<ServingSession> next = open_serving(args, /*need_target=*/false, Build::Config);
  std::vector<server::ServedModel> models = server::served_models(next->family, *next->store, chat_templates_);
  const std::size_t count = models.size();
  server::ModelChange done{c.add ? "add" : "remove"};
  std::string why_not;
  if (const std::optional<RuntimeConfig> config = serving->in_place(*next->store, next->config, why_not)) {
    // Over the memory the runtime holds: running requests keep their KV cache and go on.
    const RebaseResult r = first_.engine->rebase(std::shared_ptr<const HostStore>(next, next->store.get()), *config).get();
    done.in_place = true;
    done.copies = r.copies;
    done.bytes = r.copy_bytes;
    http_.set_models(std::move(models), serving);
    // The runtime reads the next store now (and keeps it): the one it read before can go.
    ServingSession& before = rebuilt_ ? *rebuilt_ : first_;
    before.store.reset();
    before.family = Family();
  } else {
    serving.reset();  // the wait below is for the engine's hold on it alone
    std::cerr << "serve: " << (c.add ? "adding '" : "removing '") << c.id << "' rebuilds the runtime: " << why_not << "\n";
    next->runtime = std::make_shared<Runtime>(*next->store, next->config);
    const std::shared_ptr<Runtime> runtime(next, next->runtime.get());  // keeps its family and store alive
    done.bytes = runtime->budget().used();
    first_.engine->set_runtime(runtime);
    http_.set_models(std::move(models), runtime);
    rebuilt_ = next;
    if (first_.runtime) {  // the family serve opened: let go once the engine has
      const std::weak_ptr<Runtime> old = first_.runtime;
      first_.runtime.reset();
      while (!old.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      first_.store.reset();
      first_.family = Family();
    }
  }
  if (!c.add) http_.set_model_state(c.id, {"removed", ""});
  applied_ = std::move(dirs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done.seconds = seconds;
  http_.record_model_change(done);
  std::cerr << "serve: " << (c.add ? "added '" : "removed '") << c.id << "' in " << seconds << " s (" << count << " models; "
            << (done.in_place ? std::to_string(done.copies) + " experts to copy in place" : "runtime rebuilt") << ")\n";
}

}  // namespace mosaic::cli
