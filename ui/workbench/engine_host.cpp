#include "workbench/engine_host.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include <QFileInfo>
#include <QMetaObject>

#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <thread>

#include "common/byte_size.h"
#include "common/error.h"
#include "common/text_file.h"
#include "model/text_stream.h"
#include "report/qt_text.h"
#include "server/served_models.h"
#include "serving/session.h"
#include "serving/session_views.h"
#include "serving/sweep_run.h"
#include "serving/config_layout.h"
#include "serving/sim_sweep.h"
#include "store/recorder.h"
#include "store/sweep_recording.h"
#include "workbench/engine_host_state.h"

namespace mosaic::ui {

namespace {

// Why the engine cannot change what it serves on now, or "" when it can; `change` names what would change.
QString busy_for(bool sweeping, bool serving_http, const QString& change) {
  if (sweeping) return EngineHost::tr("A sweep is serving on this engine; stop it before changing %1.").arg(change);
  if (serving_http) return EngineHost::tr("The HTTP server is serving on this engine; stop it before changing %1.").arg(change);
  return {};
}

FamilyInfo describe(const FamilyView& f) {
  FamilyInfo info;
  info.layers = f.layers;
  info.experts = f.experts;
  info.top_k = f.top_k;
  info.distances_from_cache = f.distances_from_cache;
  info.bytes_per_expert = static_cast<qint64>(f.bytes_per_expert);
  info.host_bytes = static_cast<qint64>(f.host_bytes);
  info.host_budget = f.host_budget ? static_cast<qint64>(*f.host_budget) : 0;
  for (const VariantView& v : f.variants)
    info.variants.push_back({q(v.name), q(v.dir), q(v.architecture), q(v.dtypes), v.parameters, v.active_parameters,
                             static_cast<qint64>(v.bytes), static_cast<qint64>(v.non_expert_bytes), v.adapter_experts, q(v.delta)});
  return info;
}

Heatmap describe(const MatrixView& m) {
  Heatmap h;
  h.kind = static_cast<Heatmap::Kind>(m.kind);
  h.title = q(m.title);
  h.row_label = q(m.row_label);
  h.column_label = q(m.column_label);
  h.rows = m.rows;
  h.columns = m.columns;
  h.values = QVector<double>(m.values.begin(), m.values.end());
  for (const auto& [l, e] : m.positions) h.positions.push_back({static_cast<int>(l), static_cast<int>(e)});
  return h;
}

// What any plan shows: the grid, the capacity and the reserve (variants are the caller's).
LayoutInfo describe(const ConsolidationPlan& plan, const CapacityPlan& cap) {
  LayoutInfo info;
  info.layers = static_cast<int>(plan.layers);
  info.experts = static_cast<int>(plan.experts);
  info.resident = QVector<int>(plan.map.begin(), plan.map.end());
  info.distance = QVector<double>(plan.distance.begin(), plan.distance.end());
  for (auto c : plan.resident_counts()) info.resident_counts << static_cast<int>(c);
  info.budget = static_cast<qint64>(cap.budget_bytes);
  info.capacity = plan.capacity;
  info.positions = cap.positions;
  info.minimum_budget = static_cast<qint64>(cap.minimum_budget());
  info.non_expert_bytes = static_cast<qint64>(cap.non_expert_bytes);
  info.bytes_per_expert = static_cast<qint64>(cap.bytes_per_expert);
  for (const ReserveItem& r : cap.reserve) info.reserve.push_back({q(r.name), q(r.detail), static_cast<qint64>(r.bytes)});
  info.policy = q(std::string(policy_name(plan.policy)));
  info.shares = QVector<double>(plan.shares.begin(), plan.shares.end());
  return info;
}

ReserveSpec reserve_spec(const ReserveSettings& r) {
  return {.context_tokens = r.context, .requests = r.requests, .prefill_chunk = r.prefill_chunk, .miss_slots = r.miss_slots};
}

// A policy a session plans (InvalidArgument naming it otherwise).
Policy session_policy(const QString& name) {
  const auto policy = parse_policy(name.toStdString());
  if (!policy) throw InvalidArgument("layout", "policy", "'" + name.toStdString() + "' is not a policy", "use round-robin, medoid or weighted");
  return *policy;
}

void describe_tiers(LayoutInfo& info, const CapacityPlan& cap, std::uint64_t distinct, std::optional<std::uint64_t> host_budget) {
  const TierBytes t = tier_bytes(distinct, planned_device_bytes(cap), host_budget);
  info.device_bytes = static_cast<qint64>(t.device);
  info.ram_bytes = static_cast<qint64>(t.ram);
  info.disk_bytes = static_cast<qint64>(t.disk);
  info.distinct_bytes = static_cast<qint64>(t.distinct);
  info.host_budget = host_budget ? static_cast<qint64>(*host_budget) : 0;
}

LayoutInfo describe(const Session& session) {
  const Layout& layout = session.layout();
  LayoutInfo info = describe(layout.plan, session.capacity());
  describe_tiers(info, session.capacity(), session.store().host_bytes(), session.store().tier().budget());
  info.resident_sets = session.runtime().resident_capacity();
  info.positions_for_sets = session.capacity().positions_for_sets;
  for (const auto& v : layout.variants) info.variants << q(v.name);
  const ReserveSpec& r = session.reserve();
  info.reserve_settings = {r.context_tokens, r.requests, r.prefill_chunk, r.miss_slots};
  info.model_context = session.family().spec().max_position_embeddings;
  for (std::int64_t n : layout.plan.deltas) info.deltas << static_cast<int>(n);
  const DeltaLayoutView d = describe_deltas(session);
  info.can_plan_hybrid = d.can_plan;
  info.delta_folders = d.folders;
  info.deltas_resident = d.resident;
  info.deltas_total = d.total;
  info.delta_positions = d.positions;
  info.delta_bytes = static_cast<qint64>(d.packed_bytes);
  if (const auto& v = layout.virtual_experts) {
    for (std::int64_t c : v->counts) info.virtual_counts << static_cast<int>(c);
    info.virtual_update_every = v->update_every;
    info.virtual_staging = v->staging;
    info.virtual_uniform_count = v->planner.uniform_count;
    info.virtual_full_nll = v->planner.full_nll;
    info.virtual_planned_nll = v->planner.planned_nll;
    info.virtual_uniform_nll = v->planner.uniform_nll;
  }
  return info;
}

}  // namespace

ServedPoint served_point(const RequestRecord& r) {
  ServedPoint p;
  p.target = q(r.target);
  p.ttft = r.stats.ttft();
  p.turnaround = r.stats.turnaround();
  p.output_tokens = r.stats.generated_tokens;
  p.swaps = r.stats.counters.swaps;
  p.outcome = r.outcome == Finish::Cancelled ? QStringLiteral("cancelled") : r.outcome == Finish::Failed ? QStringLiteral("failed") : QStringLiteral("completed");
  for (const LayerCounts& l : r.stats.counters.layers) {
    p.hits << static_cast<int>(l.hits);
    p.misses << static_cast<int>(l.misses);
  }
  return p;
}

EngineHost::EngineHost(QObject* parent) : QObject(parent), state_(std::make_unique<State>()) {
  qRegisterMetaType<FamilyInfo>();
  qRegisterMetaType<LayoutInfo>();
  qRegisterMetaType<TokenTrace>();
  qRegisterMetaType<Heatmap>();
  qRegisterMetaType<ExpertUsage>();
  qRegisterMetaType<QVector<ExpertRoute>>();
  qRegisterMetaType<ReportData>();
  qRegisterMetaType<ServedPoint>();
  qRegisterMetaType<HttpSettings>();
  thread_.setObjectName(QStringLiteral("mosaic-engine"));
  context_ = new QObject;
  context_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, context_, &QObject::deleteLater);
  thread_.start();
}

EngineHost::~EngineHost() {
  cancel_open_ = true;
  stop_serving_ = true;
  stopChat();
  stopCompare();
  post([this] {
    state_->join_sweep();
    state_->stop_http(0);
    state_->session.reset();
  });
  thread_.quit();
  thread_.wait();
}

void EngineHost::post(std::function<void()> work) {
  QMetaObject::invokeMethod(context_, std::move(work), Qt::QueuedConnection);
}

void EngineHost::cancelOpen() { cancel_open_ = true; }

void EngineHost::openFamily(const QStringList& dirs, qint64 budgetBytes, const QString& policy, const ReserveSettings& reserve,
                            const QVector<double>& shares) {
  cancel_open_ = false;
  post([this, dirs, budgetBytes, policy, reserve, shares] {
    State& st = *state_;
    try {
      stop_serving_ = true;  // a sweep on the old family ends before the family goes
      st.join_sweep();
      std::vector<std::filesystem::path> paths;
      for (const QString& d : dirs) paths.emplace_back(d.toStdString());
      auto last = std::chrono::steady_clock::now();
      Q_EMIT progress(tr("Hashing and expert distances"), 0, 1);
      auto opened = Session::open(
          paths,
          [&](std::int64_t done, std::int64_t total) {
            const auto now = std::chrono::steady_clock::now();
            if (now - last > std::chrono::milliseconds(100) || done == total) {  // at most ~10 updates a second
              last = now;
              Q_EMIT progress(tr("Expert distances"), static_cast<int>(done), static_cast<int>(total));
            }
            return !cancel_open_.load();
          },
          st.host_budget);
      if (opened.is_cancelled()) return Q_EMIT familyFailed(tr("Cancelled."));
      (*opened)->set_device(st.device);  // rethrows a failure; the device was usable when chosen
      (*opened)->set_cpu_weights(st.cpu_weights);  // nothing is planned yet: checked when it is
      // The server and running chats keep being served: the new family is served on their engine.
      if (st.session && st.session->planned() && (st.serving_http() || st.requests_running()))
        return serveChangedFamily(std::move(*opened), budgetBytes, policy, reserve, shares);
      st.session = std::move(*opened);
      st.own_models.clear();  // loaded from the old family's folders
      st.chat_models.clear();
      Q_EMIT progress(tr("Ready"), 1, 1);
      Q_EMIT familyOpened(describe(describe_family(*st.session)));
    } catch (const std::exception& e) {
      return Q_EMIT familyFailed(QString::fromUtf8(e.what()));  // the old session, if any, still serves
    }
    // Shares named for other folders (an ESFT adapter brought its base in) weigh alike instead.
    planLayout(budgetBytes, policy, reserve, shares.size() == static_cast<qsizetype>(st.session->family().size()) ? shares : QVector<double>());
  });
}

void EngineHost::probeDevices() {
  post([this] {
    const auto why = device_unavailable(Device::Cuda);
    Q_EMIT devicesProbed(why ? QString() : QString::fromStdString(device_description(Device::Cuda)).remove(QStringLiteral("cuda: ")),
                         why ? QString::fromStdString(*why) : QString());
  });
}

void EngineHost::setHostBudget(qint64 bytes) {
  post([this, bytes] { state_->host_budget = bytes > 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(bytes)) : std::nullopt; });
}

void EngineHost::setDevice(const QString& name) {
  post([this, name] {
    State& st = *state_;
    const QString current = QString::fromUtf8(device_name(st.device));
    const auto device = parse_device(name.toStdString());
    if (!device) return Q_EMIT deviceFailed(tr("'%1' is not a device: choose cpu or cuda.").arg(name), current);
    if (*device == st.device) return Q_EMIT deviceChanged(current);
    if (const QString busy = busy_for(st.sweeping, st.serving_http(), tr("the device")); !busy.isEmpty()) return Q_EMIT deviceFailed(busy, current);
    try {
      if (st.session) st.session->set_device(*device);  // the layout on screen, served there now
      st.device = *device;
      Q_EMIT deviceChanged(QString::fromUtf8(device_name(*device)));  // "cuda" for "gpu" too
      if (st.session) Q_EMIT layoutPlanned(describe(*st.session));  // what it holds there
    } catch (const std::exception& e) {
      Q_EMIT deviceFailed(QString::fromUtf8(e.what()), current);
    }
  });
}

void EngineHost::setCpuWeights(const QString& name) {
  post([this, name] {
    State& st = *state_;
    const QString current = QString::fromUtf8(cpu_weights_name(st.cpu_weights));
    const auto weights = parse_cpu_weights(name.toStdString());
    if (!weights) return Q_EMIT cpuWeightsFailed(tr("'%1' is not a way to hold weights: choose stored, fp32 or mapped.").arg(name), current);
    if (*weights == st.cpu_weights) return Q_EMIT cpuWeightsChanged(current);
    if (const QString busy = busy_for(st.sweeping, st.serving_http(), tr("how it holds weights")); !busy.isEmpty())
      return Q_EMIT cpuWeightsFailed(busy, current);
    try {
      if (st.session) st.session->set_cpu_weights(*weights);  // the layout on screen, served that way now
      st.cpu_weights = *weights;
      Q_EMIT cpuWeightsChanged(name);
    } catch (const std::exception& e) {
      Q_EMIT cpuWeightsFailed(QString::fromUtf8(e.what()), current);
    }
  });
}

// The family changed while the HTTP server or a chat serves: models no longer in it are withdrawn
// (their requests finish first, 2 s at most), the new family is planned onto the running engine
// within the budget it serves under (unless another was asked for) — in place where the runtime
// holds it, so that running requests keep their KV cache — and the server serves its models from
// the next step; clients keep their connections and streams.
void EngineHost::serveChangedFamily(std::unique_ptr<Session> opened, qint64 budgetBytes, const QString& policyName, const ReserveSettings& reserve,
                                    const QVector<double>& shares) {
  State& st = *state_;
  const auto t0 = std::chrono::steady_clock::now();
  const Policy policy = session_policy(policyName);
  const ReserveSpec spec = reserve_spec(reserve);
  std::vector<server::ServedModel> models;
  bool added = false;
  for (const Variant& v : opened->family().variants()) added |= st.session->family().find(v.name) == nullptr;
  std::vector<std::string> removed;
  for (const Variant& v : st.session->family().variants())
    if (!opened->family().find(v.name)) removed.push_back(v.name);
  if (st.serving_http()) {
    models = server::served_models(opened->family(), opened->store(), !st.http_plain_chat);
    for (const std::string& name : removed) st.http->withdraw(name, 2.0);
  }
  const std::span<const double> weights(shares.constData(), static_cast<std::size_t>(shares.size()));
  const std::uint64_t budget = budgetBytes > 0 ? static_cast<std::uint64_t>(budgetBytes) : st.session->capacity().budget_bytes;
  Session::Change change;
  try {
    change = opened->plan_on(st.session, budget, policy, spec, shares.size() == static_cast<qsizetype>(opened->family().size()) ? weights : std::span<const double>());
  } catch (...) {  // the old family serves on: its models again, the withdrawn ones included
    st.follow_runtime();
    throw;
  }
  QStringList names;
  for (const auto& m : models) names << QString::fromStdString(m.id);
  if (st.serving_http()) {
    server::ModelChange done{added && !removed.empty() ? "replace" : !removed.empty() ? "remove" : "add"};
    done.in_place = change.in_place;
    done.copies = change.rebase.copies;
    done.bytes = change.in_place ? change.rebase.copy_bytes : opened->runtime().budget().used();
    st.http->set_models(std::move(models), opened->engine().runtime());
    done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.http->record_model_change(done);
  }
  st.session = std::move(opened);
  st.session->release_retired(2.0);
  st.own_models.clear();
  st.chat_models.clear();
  Q_EMIT progress(tr("Ready"), 1, 1);
  Q_EMIT familyOpened(describe(describe_family(*st.session)));
  Q_EMIT layoutPlanned(describe(*st.session));
  if (st.serving_http()) Q_EMIT httpServerModels(names);
  Q_EMIT familyChangeServed(change.in_place ? tr("Family changed in place while serving: %1 experts kept, %2 to copy (%3); running requests kept their KV cache.")
                                                  .arg(change.rebase.kept)
                                                  .arg(change.rebase.copies)
                                                  .arg(QString::fromStdString(format_bytes(change.rebase.copy_bytes)))
                                            : tr("Family changed while serving: runtime rebuilt (%1); running requests are recomputed.")
                                                  .arg(QString::fromStdString(change.why_rebuilt)));
}

void EngineHost::planLayout(qint64 budgetBytes, const QString& policyName, const ReserveSettings& reserve, const QVector<double>& shares) {
  post([this, budgetBytes, policyName, reserve, shares] {
    State& st = *state_;
    if (!st.session) return Q_EMIT layoutFailed(tr("Open a family first."));
    if (st.sweeping) return Q_EMIT layoutFailed(tr("A sweep is serving on this engine; stop it before planning another layout."));
    try {
      const Policy policy = session_policy(policyName);
      const ReserveSpec spec = reserve_spec(reserve);
      st.session->plan(budgetBytes > 0 ? static_cast<std::uint64_t>(budgetBytes) : 0, policy, spec,
                       std::span<const double>(shares.constData(), static_cast<std::size_t>(shares.size())));
      st.follow_runtime();  // the HTTP server, if one serves, carries on under the new layout
      Q_EMIT layoutPlanned(describe(*st.session));
      startPendingHttp();
    } catch (const std::exception& e) {
      Q_EMIT layoutFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::planVirtual(qint64 budgetBytes, const ReserveSettings& reserve, const QString& calibration) {
  post([this, budgetBytes, reserve, calibration] {
    State& st = *state_;
    if (!st.session) return Q_EMIT layoutFailed(tr("Open a family first."));
    if (st.sweeping) return Q_EMIT layoutFailed(tr("A sweep is serving on this engine; stop it before planning another layout."));
    try {
      const ReserveSpec spec = reserve_spec(reserve);
      std::vector<std::int64_t> ids;
      if (!calibration.isEmpty()) {
        // Encoded as plan-virtual encodes it: with the first variant's tokenizer.
        const std::string text = read_text_file(calibration.toStdString(), "choose a text file in the serving domain");
        ids = st.session->tokenizer(st.session->family().variants().front().name)->encode(text, /*add_special=*/false);
      }
      st.session->plan_virtual(budgetBytes > 0 ? static_cast<std::uint64_t>(budgetBytes) : 0, spec, ids);
      st.follow_runtime();
      LayoutInfo info = describe(*st.session);
      info.virtual_calibration = calibration;
      Q_EMIT layoutPlanned(info);
      startPendingHttp();
    } catch (const std::exception& e) {
      Q_EMIT layoutFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::planFromConfigs(const QString& dir, qint64 budgetBytes, const QString& policyName, const ReserveSettings& reserve,
                                 const QVector<double>& shares) {
  post([this, dir, budgetBytes, policyName, reserve, shares] {
    try {
      const auto policy = parse_policy(policyName.toStdString());
      if (!policy) throw InvalidArgument("layout", "policy", "'" + policyName.toStdString() + "' is not a policy", "use round-robin or weighted");
      const SimFamily family = load_sim_family({dir.toStdString()});
      const ReserveSpec spec = reserve_spec(reserve);
      const ConfigLayout planned = plan_config_layout(family, budgetBytes > 0 ? static_cast<std::uint64_t>(budgetBytes) : 0, *policy, spec,
                                                      std::span<const double>(shares.constData(), static_cast<std::size_t>(shares.size())));
      LayoutInfo info = describe(planned.plan, planned.capacity);
      // Configs say nothing of which tensors variants share: every variant counted whole.
      const CapacityPlan& c = planned.capacity;
      const std::uint64_t variant_bytes = c.non_expert_bytes + static_cast<std::uint64_t>(c.positions) * c.bytes_per_expert;
      describe_tiers(info, c, variant_bytes * family.targets.size(), state_->host_budget);
      info.distinct_assumed = true;
      info.config_family = dir;
      // No distances: MoE positions show as 0 (the grid takes NaN for a dense layer), dense ones stay NaN.
      for (std::size_t p = 0; p < planned.plan.rank.size(); ++p)
        if (planned.plan.rank[p] >= 0) info.distance[static_cast<qsizetype>(p)] = 0;
      for (const std::string& n : family.names()) info.variants << q(n);
      info.reserve_settings = reserve;
      info.model_context = family.shapes.spec.max_position_embeddings;
      Q_EMIT configLayoutPlanned(info);
    } catch (const std::exception& e) {
      Q_EMIT layoutFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::importLayout(const QString& file) {
  post([this, file] {
    State& st = *state_;
    if (!st.session) return Q_EMIT layoutFailed(tr("Open a family first."));
    if (st.sweeping) return Q_EMIT layoutFailed(tr("A sweep is serving on this engine; stop it before importing a layout."));
    try {
      st.session->apply(load_layout(file.toStdString()));
      st.follow_runtime();
      Q_EMIT layoutPlanned(describe(*st.session));
      startPendingHttp();
    } catch (const std::exception& e) {
      Q_EMIT layoutFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::exportLayout(const QString& file) {
  post([this, file] {
    State& st = *state_;
    if (!st.session) return Q_EMIT layoutFailed(tr("Open a family first."));
    try {
      save_layout(st.session->layout(), file.toStdString());
      Q_EMIT layoutExported(file);
    } catch (const std::exception& e) {
      Q_EMIT layoutFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::chat(const QString& target, const QVector<ChatTurn>& conversation, int maxNewTokens, double temperature, double topP,
                      quint64 seed) {
  post([this, target, conversation, maxNewTokens, temperature, topP, seed] {
    State& st = *state_;
    if (!st.session) return Q_EMIT chatFailed(tr("Open a family first."));
    try {
      const std::string name = target.toStdString();
      if (st.chat_models.empty())
        for (server::ServedModel& m : server::served_models(st.session->family(), st.session->store())) {
          std::string id = m.id;  // not m.id itself: the model is moved from before the key is made
          st.chat_models.emplace(std::move(id), std::make_shared<const server::ServedModel>(std::move(m)));
        }
      const auto found = st.chat_models.find(name);
      if (found == st.chat_models.end()) throw InvalidArgument("chat", "target '" + name + "'", "is not a model of the open family");
      const std::shared_ptr<const server::ServedModel> model = found->second;  // the stream's, whatever the family becomes
      const Tokenizer& tok = model->tokenizer;
      std::vector<server::ChatMessage> messages;
      for (const ChatTurn& turn : conversation) messages.push_back({turn.role.toStdString(), turn.content.toStdString()});
      if (messages.empty() || messages.back().content.empty()) throw InvalidArgument("chat", "prompt", "is empty", "type something first");
      GenerationRequest req;
      req.prompt = server::chat_prompt_ids(*model, messages);
      if (req.prompt.empty()) throw InvalidArgument("chat", "prompt", "is empty", "type something first");
      const std::int64_t context = st.session->family().spec().max_position_embeddings;
      const auto prompt_tokens = static_cast<std::int64_t>(req.prompt.size());
      if (context > 0 && prompt_tokens >= context)
        throw InvalidArgument("chat", conversation.size() > 1 ? "conversation" : "prompt",
                              "is " + std::to_string(prompt_tokens) + " tokens; the model's context is " + std::to_string(context),
                              conversation.size() > 1 ? "start a New chat" : "shorten it");
      req.max_new_tokens = context > 0 ? std::min<std::int64_t>(maxNewTokens, context - prompt_tokens) : maxNewTokens;
      const QString cut = req.max_new_tokens < maxNewTokens
                              ? tr(" · max tokens cut to %1: the model's context is %2 tokens").arg(req.max_new_tokens).arg(context)
                              : QString();
      req.sampling.temperature = temperature;
      req.sampling.top_p = topP;
      req.sampling.seed = seed;
      req.stop_ids = st.session->family().spec().eos_token_ids;
      // The stream's state lives with the callbacks, on the engine's thread; this thread moves on.
      struct Stream {
        std::shared_ptr<const server::ServedModel> model;  // its tokenizer, which `text` decodes with
        TextStream text;
        RuntimeCounters previous;
        QVector<ExpertRoute> routes;  // the step's, until its token streams
        QStringList prompt;
        int prompt_tokens = 0;
      };
      auto stream = std::make_shared<Stream>(Stream{model, TextStream(tok), {}, {}, {}, static_cast<int>(req.prompt.size())});
      // Each prompt token's own text as it reads in the prompt (a Metaspace decoder drops the space only at the start).
      for (std::size_t i = 0; i < req.prompt.size(); ++i)
        stream->prompt << QString::fromStdString(tok.decode(std::span<const std::int64_t>(&req.prompt[i], 1), false, i == 0));
      QStringList names;  // target index → name, for whose copy served a choice
      for (int i = 0; i < st.session->store().targets(); ++i) names << QString::fromStdString(st.session->store().name(i));
      RequestCallbacks callbacks;
      callbacks.on_routes = [stream, names](const RequestHandle&, std::int64_t position, const std::vector<RoutedExpert>& routes) {
        for (const RoutedExpert& r : routes)
          stream->routes.push_back({static_cast<int>(position + r.token), r.layer, r.expert, static_cast<ExpertRoute::Outcome>(r.outcome),
                                    r.served_by >= 0 ? names.value(r.served_by) : QString(), r.served_expert});
      };
      callbacks.on_token = [this, stream](const RequestHandle&, std::int64_t token, const RuntimeCounters& now) {
        TokenTrace t;
        t.token = token;
        t.text = QString::fromStdString(stream->text.push(token));
        const auto generated = static_cast<int>(stream->text.tokens().size());
        t.position = stream->prompt_tokens + generated - 1;
        t.routes = std::exchange(stream->routes, {});
        if (generated == 1) t.prompt = stream->prompt;
        stream->previous.layers.resize(now.layers.size());
        for (std::size_t l = 0; l < now.layers.size(); ++l) {
          t.hits << static_cast<int>(now.layers[l].hits - stream->previous.layers[l].hits);
          t.misses << static_cast<int>(now.layers[l].misses - stream->previous.layers[l].misses);
          t.disk << static_cast<int>(now.layers[l].disk_loads - stream->previous.layers[l].disk_loads);
        }
        t.swaps = now.swaps - stream->previous.swaps;
        stream->previous = now;
        Q_EMIT chatToken(t);
      };
      callbacks.on_finish = [this, stream, cut](const RequestHandle& h, const RequestResult& r) {
        {
          std::lock_guard lock(state_->request_mutex);
          if (state_->request && state_->request->id() == h.id()) state_->request.reset();
        }
        if (r.finish == Finish::Failed) return Q_EMIT chatFailed(QString::fromStdString(r.error));
        const LayerCounts total = r.stats.counters.total();
        Q_EMIT chatFinished(QString::fromStdString(stream->text.finish()),
                            tr("%1 tokens (%2) · TTFT %3 ms · %4 ms/token · %5 hits, %6 misses · %7 swap(s)")
                                .arg(r.tokens.size())
                                .arg(QString::fromStdString(std::string(finish_name(r.finish))))
                                .arg(r.stats.ttft() * 1e3, 0, 'f', 1)
                                .arg(r.stats.tpot() * 1e3, 0, 'f', 1)
                                .arg(total.hits)
                                .arg(total.misses)
                                .arg(r.stats.counters.swaps) +
                                cut);
      };
      std::lock_guard lock(st.request_mutex);  // held across submit: a fast finish clears what is set here
      st.request = st.session->engine().submit({name, req}, callbacks);
    } catch (const std::exception& e) {
      Q_EMIT chatFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::stopChat() {
  std::lock_guard lock(state_->request_mutex);
  if (state_->request) state_->request->cancel();
}

void EngineHost::requestHeatmap(Heatmap::Kind kind, int a, int b, int layer) {
  post([this, kind, a, b, layer] {
    State& st = *state_;
    if (!st.session) return Q_EMIT heatmapFailed(tr("Open a family first."));
    const auto m = distance_matrix(*st.session, static_cast<MatrixView::Kind>(kind), a, b,
                                   layer >= 0 ? std::optional<std::int64_t>(layer) : std::nullopt);
    if (m.is_failed()) return Q_EMIT heatmapFailed(QString::fromStdString(m.error_message()));
    if (m.ok()) Q_EMIT heatmapReady(describe(*m));
  });
}

void EngineHost::requestUsage(const QString& text) {
  post([this, text] {
    State& st = *state_;
    if (!st.session) return Q_EMIT usageFailed(tr("Open a family first."));
    try {
      if (text.trimmed().isEmpty()) throw InvalidArgument("expert usage", "text", "is empty", "paste or type a text to route");
      const std::string utf8 = text.toStdString();
      const ModelSpec& spec = st.session->family().spec();
      const HostStore& store = st.session->store();
      ExpertUsage usage;
      usage.layers = static_cast<int>(spec.num_layers);
      usage.experts = static_cast<int>(spec.num_experts);
      usage.counts.fill(0, static_cast<qsizetype>(store.targets()) * usage.layers * usage.experts);
      usage.masked = st.session->runtime().miss_policy().masks_router();
      // Windows the model's context holds; one request per window, all variants' at once: the
      // engine batches them.
      const std::int64_t window = spec.max_position_embeddings > 1 ? std::min<std::int64_t>(spec.max_position_embeddings - 1, 512) : 512;
      std::vector<std::shared_ptr<RequestHandle>> handles;
      for (int v = 0; v < store.targets(); ++v) {
        usage.variants << QString::fromStdString(store.name(v));
        const std::vector<std::int64_t> ids = st.session->tokenizer(store.name(v))->encode(utf8);
        usage.tokens << static_cast<qint64>(ids.size());
        for (std::size_t begin = 0; begin < ids.size(); begin += static_cast<std::size_t>(window)) {
          GenerationRequest g;
          g.prompt.assign(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                          ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), begin + static_cast<std::size_t>(window))));
          g.max_new_tokens = 1;  // the prompt's steps route every token of the window; the one token is not fed back
          RequestCallbacks callbacks;
          // Runs on the engine thread while this one waits below: nothing else writes the counts.
          callbacks.on_routes = [&usage, v](const RequestHandle&, std::int64_t, const std::vector<RoutedExpert>& routes) {
            for (const RoutedExpert& r : routes) ++usage.counts[(static_cast<qsizetype>(v) * usage.layers + r.layer) * usage.experts + r.expert];
          };
          handles.push_back(st.session->engine().submit({store.name(v), std::move(g)}, callbacks));
        }
      }
      for (const auto& h : handles) {
        const RequestResult& r = h->wait();
        if (r.finish == Finish::Failed) throw InvalidArgument("expert usage", h->target(), r.error, "try a shorter text");
      }
      Q_EMIT usageReady(usage);
    } catch (const std::exception& e) {
      Q_EMIT usageFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::loadRuns(const QString& database) {
  post([this, database] {
    try {
      if (!QFileInfo::exists(database)) throw IoError(database.toStdString(), "", "does not exist", "record runs with the serving panel or mosaic-cli bench");
      const Recorder recorder(database.toStdString(), Recorder::Access::ReadOnly);
      Q_EMIT runsLoaded(load_report_data(recorder, {}, QFileInfo(database).fileName().toStdString(), /*incomplete=*/true));
    } catch (const std::exception& e) {
      Q_EMIT runsFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::loadTrace(const QString& database, qint64 run, qint64 request) {
  post([this, database, run, request] {
    try {
      const Recorder recorder(database.toStdString(), Recorder::Access::ReadOnly);
      const auto runs = recorder.runs();
      const auto info = std::find_if(runs.begin(), runs.end(), [&](const RunInfo& r) { return r.id == run; });
      if (info == runs.end()) throw InvalidArgument(database.toStdString(), "run " + std::to_string(run), "is not in this database");
      const auto requests = recorder.requests(run);
      const auto rec = std::find_if(requests.begin(), requests.end(), [&](const RequestRecord& r) { return r.index == request; });
      if (rec == requests.end())
        throw InvalidArgument(database.toStdString(), "request " + std::to_string(request),
                              "is not among run " + std::to_string(run) + "'s " + std::to_string(requests.size()) + " requests",
                              "requests are numbered from 0 in workload order");
      const auto routes = recorder.routes(run, request);
      if (routes.empty())
        throw InvalidArgument(database.toStdString(), "run " + std::to_string(run), "was not traced",
                              "run the sweep with \"trace_routes\": true (the serving panel's 'Record expert traces')");
      // served_by indexes the run's targets, as its config recorded them.
      const auto config = nlohmann::json::parse(info->config_json, nullptr, false);
      QStringList names;
      if (config.is_object() && config.contains("targets") && config["targets"].is_array())
        for (const auto& t : config["targets"]) names << QString::fromStdString(t.get<std::string>());
      QVector<ExpertRoute> out;
      for (const RoutedExpert& r : routes)
        out.push_back({r.token, r.layer, r.expert, static_cast<ExpertRoute::Outcome>(r.outcome),
                       r.served_by >= 0 ? names.value(r.served_by, QStringLiteral("#%1").arg(r.served_by)) : QString(), r.served_expert});
      QStringList labels;
      for (std::int64_t p = 0; p < rec->stats.prompt_tokens + rec->stats.generated_tokens; ++p)
        labels << (p < rec->stats.prompt_tokens ? tr("prompt %1").arg(p) : tr("output %1").arg(p - rec->stats.prompt_tokens));
      Q_EMIT traceLoaded(tr("Run %1 (%2), request %3 for %4").arg(run).arg(q(info->strategy)).arg(request).arg(q(rec->target)),
                         q(rec->target), static_cast<int>(rec->stats.counters.layers.size()), labels, out);
    } catch (const std::exception& e) {
      Q_EMIT runsFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::exportReport(const QString& database, const QList<qint64>& runs, const QString& dir) {
  post([this, database, runs, dir] {
    try {
      const Recorder recorder(database.toStdString(), Recorder::Access::ReadOnly);
      const ReportData data = load_report_data(recorder, std::vector<std::int64_t>(runs.begin(), runs.end()),
                                               QFileInfo(database).fileName().toStdString());
      check_one_setup(data, QFileInfo(database).fileName().toStdString());  // runs of two families would be averaged together
      std::filesystem::create_directories(dir.toStdString());
      write_report_tables(data, dir.toStdString());
      Q_EMIT reportDataReady(data, dir);
    } catch (const std::exception& e) {
      Q_EMIT runsFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::startServing(const QString& sweepJson, const QString& database) {
  stop_serving_ = false;
  post([this, sweepJson, database] {
    State& st = *state_;
    if (!st.session) return Q_EMIT servingFailed(tr("Open a family first."));
    if (st.sweeping) return Q_EMIT servingFailed(tr("A sweep is already running."));
    if (st.serving_http()) return Q_EMIT servingFailed(tr("The HTTP server is serving on this engine; stop it before a sweep."));
    SweepConfig config;
    try {
      config = parse_sweep_config(sweepJson.toStdString(), "serving panel", ".");
    } catch (const std::exception& e) {
      return Q_EMIT servingFailed(QString::fromUtf8(e.what()));
    }
    config.variants.clear();
    for (const Variant& v : st.session->family().variants()) config.variants.push_back(v.checkpoint->dir());
    st.join_sweep();
    st.sweeping = true;
    Session* session = st.session.get();
    st.sweep = std::thread([this, session, config, database] {
      try {
        Recorder recorder(database.toStdString());
        recorder.check_writable();
        SweepEvents events;
        events.rates_chosen = [&](const std::vector<SaturationProbe>& probes, const std::vector<double>& rates) {
          QStringList measured, chosen;
          for (const SaturationProbe& p : probes) measured << QStringLiteral("%1 %2").arg(q(p.strategy)).arg(p.rate_per_s, 0, 'g', 3);
          for (double r : rates) chosen << QString::number(r, 'g', 3);
          Q_EMIT servingRatesChosen(tr("Rates from saturation (req/s): %1; measured %2; each strategy stops at twice its own.")
                                        .arg(chosen.join(QStringLiteral(", ")), measured.join(QStringLiteral(", "))));
        };
        events.probe_progress = [&](const std::string& strategy, std::size_t done, std::size_t total) {
          if (done == total || done % std::max<std::size_t>(1, total / 50) == 0)  // a burst holds up to 4096
            Q_EMIT servingProbeProgress(q(strategy), static_cast<int>(done), static_cast<int>(total));
          return !stop_serving_.load();
        };
        events.run_started = [&](SweepRun& r, std::size_t requests) {
          Q_EMIT servingRunStarted(q(r.strategy), r.rate, r.run_id, static_cast<int>(requests));
        };
        events.request_finished = [&](const SweepRun& r, const RequestRecord& rec, std::size_t done, std::size_t total) {
          ServedPoint p = served_point(rec);
          p.strategy = q(r.strategy);
          p.rate = r.rate;
          p.run_id = r.run_id;
          p.finish = rec.stats.finish;
          p.done = static_cast<int>(done);
          p.total = static_cast<int>(total);
          Q_EMIT servedRequest(p);
          return !stop_serving_.load();
        };
        // The simulated clock reads no weights: the variants' config files (sim_family.h) and the profile suffice.
        const auto outcome = config.clock == RunClock::Simulated
                                 ? simulate_sweep(config, load_sim_family(config.variants), load_device_profile(config.device_profile),
                                                  recording(recorder, events))
                                 : run_sweep(config, session->family(), session->store(), session->analysis(), recording(recorder, events),
                                             &session->engine());
        state_->sweeping = false;
        if (outcome.is_failed()) return Q_EMIT servingFailed(QString::fromStdString(outcome.error_message()));
        Q_EMIT servingFinished(outcome.ok() ? tr("Sweep finished; every run recorded.") : tr("Stopped; the runs so far are recorded."),
                               database);
      } catch (const std::exception& e) {
        state_->sweeping = false;
        Q_EMIT servingFailed(QString::fromUtf8(e.what()));
      }
    });
  });
}

void EngineHost::stopServing() { stop_serving_ = true; }

}  // namespace mosaic::ui
