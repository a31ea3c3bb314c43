// The side-by-side comparison: both sides' requests start together; a served side streams from the
// engine's thread while an "own weights" side runs the reference loop here.
#include <chrono>

#include "common/error.h"
#include "model/text_stream.h"
#include "model/tokenizer.h"
#include "runtime/generation.h"
#include "workbench/engine_host_state.h"

namespace mosaic::ui {

void EngineHost::stopCompare() {
  state_->stop_compare = true;
  std::lock_guard lock(state_->request_mutex);
  for (const auto& h : state_->compare_requests) h->cancel();
}

void EngineHost::compare(const QString& left, bool leftOwn, const QString& right, bool rightOwn, const QString& prompt, int maxNewTokens,
                         double temperature, double topP) {
  state_->stop_compare = false;
  post([this, left, leftOwn, right, rightOwn, prompt, maxNewTokens, temperature, topP] {
    State& st = *state_;
    const QString names[2] = {left, right};
    const bool own[2] = {leftOwn, rightOwn};
    if (!st.session) {
      for (int side : {0, 1}) Q_EMIT compareFailed(side, tr("Open a family first."));
      return;
    }
    {
      std::lock_guard lock(st.request_mutex);
      st.compare_requests.clear();
    }
    std::vector<int> reference;  // sides run here once the served ones are on their way
    for (int side : {0, 1}) {
      try {
        const std::string name = names[side].toStdString();
        const Variant* variant = st.session->family().find(name);
        if (variant == nullptr) throw InvalidArgument("compare", name, "is not a variant of the open family");
        const std::shared_ptr<const Tokenizer> tok = st.session->tokenizer(name);
        GenerationRequest req;
        req.prompt = tok->encode(prompt.toStdString());
        if (req.prompt.empty()) throw InvalidArgument("compare", "prompt", "is empty", "type something first");
        req.max_new_tokens = maxNewTokens;
        req.sampling = {.temperature = temperature, .top_p = topP, .seed = 1};  // one seed for both sides
        req.stop_ids = st.session->family().spec().eos_token_ids;
        if (own[side]) {
          if (variant->checkpoint->is_adapter())
            throw InvalidArgument("compare", name, "is an ESFT adapter: it has no weights of its own beyond its tuned experts",
                                  "compare it as served, or compare its base's own weights");
          reference.push_back(side);
          continue;
        }
        struct Stream {
          std::shared_ptr<const Tokenizer> tokenizer;  // outlives a change of family, as the stream may
          TextStream text;
        };
        auto stream = std::make_shared<Stream>(Stream{tok, TextStream(*tok)});
        RequestCallbacks callbacks;
        callbacks.on_token = [this, side, stream](const RequestHandle&, std::int64_t token, const RuntimeCounters&) {
          Q_EMIT compareToken(side, token, QString::fromStdString(stream->text.push(token)));
        };
        callbacks.on_finish = [this, side, stream](const RequestHandle&, const RequestResult& r) {
          if (r.finish == Finish::Failed) return Q_EMIT compareFailed(side, QString::fromStdString(r.error));
          Q_EMIT compareFinished(side, QString::fromStdString(stream->text.finish()), tr("%1 tokens (%2) · served, the layout on screen · TTFT %3 ms · %4 ms/token")
                                           .arg(r.tokens.size())
                                           .arg(QString::fromUtf8(finish_name(r.finish)))
                                           .arg(r.stats.ttft() * 1e3, 0, 'f', 1)
                                           .arg(r.stats.tpot() * 1e3, 0, 'f', 1));
        };
        std::lock_guard lock(st.request_mutex);
        st.compare_requests.push_back(st.session->engine().submit({name, std::move(req)}, callbacks));
      } catch (const std::exception& e) {
        Q_EMIT compareFailed(side, QString::fromUtf8(e.what()));
      }
    }
    for (int side : reference) {
      try {
        const std::string name = names[side].toStdString();
        auto& model = st.own_models[name];
        if (!model) model = Model::load(*st.session->family().find(name)->checkpoint);
        const std::shared_ptr<const Tokenizer> tok = st.session->tokenizer(name);
        GenerationRequest req;
        req.prompt = tok->encode(prompt.toStdString());
        req.max_new_tokens = maxNewTokens;
        req.sampling = {.temperature = temperature, .top_p = topP, .seed = 1};
        req.stop_ids = st.session->family().spec().eos_token_ids;
        TextStream stream(*tok);
        const auto t0 = std::chrono::steady_clock::now();
        const GenerationResult r = generate(*model, req, [&](std::int64_t token, std::int64_t) {
          Q_EMIT compareToken(side, token, QString::fromStdString(stream.push(token)));
          return !state_->stop_compare.load();
        });
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        Q_EMIT compareFinished(side, QString::fromStdString(stream.finish()), tr("%1 tokens (%2) · its own weights alone (reference forward) · %3 ms/token")
                                         .arg(r.tokens.size())
                                         .arg(QString::fromUtf8(finish_name(r.finish)))
                                         .arg(r.tokens.empty() ? 0.0 : seconds * 1e3 / static_cast<double>(r.tokens.size()), 0, 'f', 1));
      } catch (const std::exception& e) {
        Q_EMIT compareFailed(side, QString::fromUtf8(e.what()));
      }
    }
  });
}

}  // namespace mosaic::ui
