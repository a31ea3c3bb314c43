#include "workbench/engine_host.h"

#include <QFileInfo>
#include <QMetaObject>

#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "common/error.h"
#include "model/synthetic.h"
#include "runtime/runtime.h"
#include "analysis/cross_distance.h"
#include "serving/session.h"
#include "serving/sweep_run.h"
#include "store/recorder.h"

namespace mosaic::ui {

struct EngineHost::State {
  std::unique_ptr<Session> session;
  std::mutex request_mutex;  // guards `request`, which stopChat() reaches from the GUI thread
  std::shared_ptr<RequestHandle> request;
};

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

FamilyInfo describe(const Family& family, const FamilyAnalysis& analysis) {
  FamilyInfo info;
  const ModelSpec& s = family.spec();
  info.layers = static_cast<int>(s.num_layers);
  info.experts = static_cast<int>(s.num_experts);
  info.top_k = static_cast<int>(s.top_k);
  info.distances_from_cache = analysis.from_cache;
  for (const Variant& v : family.variants()) {
    const Checkpoint& ck = *v.checkpoint;
    VariantInfo vi;
    vi.name = qs(v.name);
    vi.dir = qs(ck.dir().string());
    vi.architecture = qs(std::string(s.model_type())) + QStringLiteral(": %1 layers × %2 experts, top-%3, hidden %4")
                                                              .arg(s.num_layers).arg(s.num_experts).arg(s.top_k).arg(s.hidden_size);
    std::map<std::string, int> dtypes;
    for (const Weight& w : ck.weights()) ++dtypes[std::string(dtype_name(w.dtype))];
    for (const auto& [name, n] : dtypes) vi.dtypes += (vi.dtypes.isEmpty() ? QString() : QStringLiteral(", ")) + qs(name);
    vi.parameters = parameter_count(s);
    vi.active_parameters = active_parameter_count(s);
    vi.bytes = static_cast<qint64>(ck.total_bytes());
    vi.non_expert_bytes = static_cast<qint64>(ck.non_expert_bytes());
    vi.adapter_experts = static_cast<int>(ck.adapter_experts().size());
    info.variants.push_back(vi);
  }
  std::int64_t l = 0;
  while (l < s.num_layers && !s.is_sparse(l)) ++l;
  if (l < s.num_layers) info.bytes_per_expert = static_cast<qint64>(family.variants().front().checkpoint->expert_bytes(l, 0));
  return info;
}

LayoutInfo describe(const Layout& layout, const CapacityPlan& cap) {
  LayoutInfo info;
  for (const auto& v : layout.variants) info.variants << qs(v.name);
  info.layers = static_cast<int>(layout.plan.layers);
  info.experts = static_cast<int>(layout.plan.experts);
  info.resident = QVector<int>(layout.plan.map.begin(), layout.plan.map.end());
  info.distance = QVector<double>(layout.plan.distance.begin(), layout.plan.distance.end());
  for (auto c : layout.plan.resident_counts()) info.resident_counts << static_cast<int>(c);
  info.budget = static_cast<qint64>(cap.budget_bytes);
  info.capacity = layout.plan.capacity;
  info.positions = cap.positions;
  info.minimum_budget = static_cast<qint64>(cap.minimum_budget());
  info.non_expert_bytes = static_cast<qint64>(cap.non_expert_bytes);
  info.bytes_per_expert = static_cast<qint64>(cap.bytes_per_expert);
  for (const ReserveItem& r : cap.reserve) info.reserve.push_back({qs(r.name), qs(r.detail), static_cast<qint64>(r.bytes)});
  info.policy = qs(std::string(policy_name(layout.plan.policy)));
  return info;
}

}  // namespace

EngineHost::EngineHost(QObject* parent) : QObject(parent), state_(std::make_unique<State>()) {
  qRegisterMetaType<FamilyInfo>();
  qRegisterMetaType<LayoutInfo>();
  qRegisterMetaType<TokenTrace>();
  qRegisterMetaType<Heatmap>();
  qRegisterMetaType<ReportData>();
  qRegisterMetaType<ServedPoint>();
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
  post([this] { state_->session.reset(); });
  thread_.quit();
  thread_.wait();
}

void EngineHost::post(std::function<void()> work) {
  QMetaObject::invokeMethod(context_, std::move(work), Qt::QueuedConnection);
}

void EngineHost::cancelOpen() { cancel_open_ = true; }

void EngineHost::openFamily(const QStringList& dirs, qint64 budgetBytes) {
  cancel_open_ = false;
  post([this, dirs, budgetBytes] {
    State& st = *state_;
    try {
      st.session.reset();
      std::vector<std::filesystem::path> paths;
      for (const QString& d : dirs) paths.emplace_back(d.toStdString());
      auto last = std::chrono::steady_clock::now();
      Q_EMIT progress(tr("Hashing and expert distances"), 0, 1);
      st.session = Session::open(paths, [&](std::int64_t done, std::int64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last > std::chrono::milliseconds(100) || done == total) {  // at most ~10 updates a second
          last = now;
          Q_EMIT progress(tr("Expert distances"), static_cast<int>(done), static_cast<int>(total));
        }
        return !cancel_open_.load();
      });
      if (!st.session) return Q_EMIT familyFailed(tr("Cancelled."));
      Q_EMIT progress(tr("Ready"), 1, 1);
      Q_EMIT familyOpened(describe(st.session->family(), st.session->analysis()));
    } catch (const std::exception& e) {
      st.session.reset();
      return Q_EMIT familyFailed(QString::fromUtf8(e.what()));
    }
    planLayout(budgetBytes, QStringLiteral("round-robin"));
  });
}

void EngineHost::planLayout(qint64 budgetBytes, const QString& policyName) {
  post([this, budgetBytes, policyName] {
    State& st = *state_;
    if (!st.session) return Q_EMIT layoutFailed(tr("Open a family first."));
    try {
      const auto policy = parse_policy(policyName.toStdString());
      if (!policy) throw InvalidArgument("layout", "policy", "'" + policyName.toStdString() + "' is not a policy", "use round-robin, medoid or weighted");
      st.session->plan(budgetBytes > 0 ? static_cast<std::uint64_t>(budgetBytes) : 0, *policy);
      Q_EMIT layoutPlanned(describe(st.session->layout(), st.session->capacity()));
    } catch (const std::exception& e) {
      Q_EMIT layoutFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::importLayout(const QString& file) {
  post([this, file] {
    State& st = *state_;
    if (!st.session) return Q_EMIT layoutFailed(tr("Open a family first."));
    try {
      st.session->apply(load_layout(file.toStdString()));
      Q_EMIT layoutPlanned(describe(st.session->layout(), st.session->capacity()));
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

void EngineHost::chat(const QString& target, const QString& prompt, int maxNewTokens, double temperature, double topP) {
  post([this, target, prompt, maxNewTokens, temperature, topP] {
    State& st = *state_;
    if (!st.session) return Q_EMIT chatFailed(tr("Open a family first."));
    try {
      const std::string name = target.toStdString();
      const Tokenizer& tok = st.session->tokenizer(name);
      GenerationRequest req;
      req.prompt = tok.encode(prompt.toStdString());
      if (req.prompt.empty()) throw InvalidArgument("chat", "prompt", "is empty", "type something first");
      req.max_new_tokens = maxNewTokens;
      req.sampling.temperature = temperature;
      req.sampling.top_p = topP;
      req.stop_ids = st.session->family().spec().eos_token_ids;
      std::vector<std::int64_t> out;
      std::string shown;
      RuntimeCounters previous = st.session->runtime().new_counters();
      auto request = st.session->engine().submit({name, req}, [&](const RequestHandle&, std::int64_t token, const RuntimeCounters& now) {
        out.push_back(token);
        // Decoding the whole answer and sending what is new keeps multi-byte characters whole.
        const std::string text = tok.decode(out);
        TokenTrace t;
        t.token = token;
        if (text.size() >= shown.size() && text.compare(0, shown.size(), shown) == 0) t.text = QString::fromUtf8(text.substr(shown.size()));
        shown = text;
        for (std::size_t l = 0; l < now.layers.size(); ++l) {
          t.hits << static_cast<int>(now.layers[l].hits - previous.layers[l].hits);
          t.misses << static_cast<int>(now.layers[l].misses - previous.layers[l].misses);
        }
        t.swaps = now.swaps - previous.swaps;
        previous = now;
        Q_EMIT chatToken(t);
      });
      {
        std::lock_guard lock(st.request_mutex);
        st.request = request;
      }
      const RequestResult& r = request->wait();
      {
        std::lock_guard lock(st.request_mutex);
        st.request.reset();
      }
      if (r.finish == Finish::Failed) throw InvalidArgument("chat", "request", r.error);
      const LayerCounts total = r.stats.counters.total();
      Q_EMIT chatFinished(tr("%1 tokens (%2) · TTFT %3 ms · %4 ms/token · %5 hits, %6 misses · %7 swap(s)")
                              .arg(r.tokens.size())
                              .arg(QString::fromStdString(std::string(finish_name(r.finish))))
                              .arg(r.stats.ttft_seconds * 1e3, 0, 'f', 1)
                              .arg(r.stats.tpot_seconds * 1e3, 0, 'f', 1)
                              .arg(total.hits)
                              .arg(total.misses)
                              .arg(r.stats.counters.swaps));
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
    try {
      const Family& family = st.session->family();
      const ExpertDistances& d = st.session->analysis().distances;
      const int n = static_cast<int>(family.size());
      if ((kind != Heatmap::Kind::Position) && (a < 0 || b < 0 || a >= n || b >= n || a == b))
        return Q_EMIT heatmapFailed(tr("Choose two different variants."));
      Heatmap h;
      h.kind = kind;
      auto name = [&](int i) { return qs(family.variants()[static_cast<std::size_t>(i)].name); };
      if (kind == Heatmap::Kind::Cross) {
        const auto cross = cross_position_distances(*family.variants()[static_cast<std::size_t>(a)].checkpoint,
                                                    *family.variants()[static_cast<std::size_t>(b)].checkpoint,
                                                    layer >= 0 ? std::optional<std::int64_t>(layer) : std::nullopt);
        if (!cross) return;
        h.rows = h.columns = static_cast<int>(cross->size());
        h.values = QVector<double>(cross->matrix.begin(), cross->matrix.end());
        for (const auto& [l, e] : cross->positions) h.positions.push_back({static_cast<int>(l), static_cast<int>(e)});
        h.title = tr("‖%1(l, e) − %2(l′, e′)‖%3").arg(name(a), name(b), layer >= 0 ? tr(", layer %1").arg(layer) : QString());
        h.row_label = tr("%1 position").arg(name(a));
        h.column_label = tr("%1 position").arg(name(b));
      } else {
        h.rows = static_cast<int>(d.layers);
        h.columns = static_cast<int>(d.experts);
        for (std::int64_t l = 0; l < d.layers; ++l)
          for (std::int64_t e = 0; e < d.experts; ++e) h.values.push_back(kind == Heatmap::Kind::Position ? d.at(l, e) : d.pair(a, b, l, e));
        h.title = kind == Heatmap::Kind::Position ? tr("Position distance d(l, e) over %1 variants").arg(n)
                                                  : tr("‖%1 − %2‖ per position").arg(name(a), name(b));
        h.row_label = tr("layer");
        h.column_label = tr("expert");
      }
      Q_EMIT heatmapReady(h);
    } catch (const std::exception& e) {
      Q_EMIT heatmapFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::loadRuns(const QString& database) {
  post([this, database] {
    try {
      if (!QFileInfo::exists(database)) throw IoError(database.toStdString(), "", "does not exist", "record runs with the serving panel or mosaic-cli bench");
      const Recorder recorder(database.toStdString());
      Q_EMIT runsLoaded(load_report_data(recorder, {}, QFileInfo(database).fileName().toStdString()));
    } catch (const std::exception& e) {
      Q_EMIT runsFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::exportReport(const QString& database, const QList<qint64>& runs, const QString& dir) {
  post([this, database, runs, dir] {
    try {
      const Recorder recorder(database.toStdString());
      const ReportData data = load_report_data(recorder, std::vector<std::int64_t>(runs.begin(), runs.end()),
                                               QFileInfo(database).fileName().toStdString());
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
    try {
      SweepConfig config = parse_sweep_config(sweepJson.toStdString(), "serving panel", ".");
      config.variants.clear();
      for (const Variant& v : st.session->family().variants()) config.variants.push_back(v.checkpoint->dir());
      Recorder recorder(database.toStdString());
      SweepEvents events;
      events.run_started = [&](const SweepRun& r, std::size_t requests) {
        Q_EMIT servingRunStarted(qs(r.strategy), r.rate, r.run_id, static_cast<int>(requests));
      };
      events.request_finished = [&](const SweepRun& r, const RequestRecord& rec, std::size_t done, std::size_t total) {
        ServedPoint p;
        p.strategy = qs(r.strategy);
        p.target = qs(rec.target);
        p.rate = r.rate;
        p.run_id = r.run_id;
        p.finish = rec.finish;
        p.ttft = rec.ttft();
        p.turnaround = rec.turnaround();
        p.output_tokens = rec.output_tokens;
        p.swaps = rec.counters.swaps;
        for (const LayerCounts& l : rec.counters.layers) {
          p.hits << static_cast<int>(l.hits);
          p.misses << static_cast<int>(l.misses);
        }
        p.done = static_cast<int>(done);
        p.total = static_cast<int>(total);
        Q_EMIT servedRequest(p);
        return !stop_serving_.load();
      };
      const bool complete = run_sweep(config, st.session->family(), st.session->store(), st.session->analysis(), recorder, events);
      Q_EMIT servingFinished(complete ? tr("Sweep finished; every run recorded.") : tr("Stopped; the runs so far are recorded."), database);
    } catch (const std::exception& e) {
      Q_EMIT servingFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::stopServing() { stop_serving_ = true; }

}  // namespace mosaic::ui
