#pragma once
// The engine on its own thread. Every call returns at once; the work runs on the engine thread and
// its results arrive as queued signals, so the GUI thread never waits on a load, a plan or a token.
#include <QObject>
#include <QStringList>
#include <QThread>

#include <atomic>
#include <memory>

#include "workbench/engine_types.h"

namespace mosaic {
class Session;
}

namespace mosaic::ui {

class EngineHost : public QObject {
  Q_OBJECT
 public:
  explicit EngineHost(QObject* parent = nullptr);
  ~EngineHost() override;  // cancels what runs and joins the thread

  // Opens the variants as one family, hashes and analyzes it (cached), and plans a first layout.
  // The family that was open stays open (and usable) until the new one has opened; a failed open
  // leaves it as it was. The first layout is planned with `policy`.
  // `shares` (weighted): one per variant in `dirs`' order, else every variant alike.
  void openFamily(const QStringList& dirs, qint64 budgetBytes, const QString& policy = QStringLiteral("round-robin"),
                  const mosaic::ui::ReserveSettings& reserve = {}, const QVector<double>& shares = {});
  void cancelOpen();
  // Asks which devices can serve here: answered by devicesProbed.
  void probeDevices();
  // Serves the open family (and every family opened after) on "cpu" or "cuda": answered by
  // deviceChanged, or deviceFailed with the device still serving.
  void setDevice(const QString& device);
  // How the CPU backend holds the open family's weights (and every family's opened after): "stored",
  // "fp32" or "mapped". Answered by cpuWeightsChanged, or cpuWeightsFailed with the way still in use.
  void setCpuWeights(const QString& weights);
  // The host tier's budget (bytes; 0: every weight in RAM) of every family opened after, and of the
  // what-if plans' tiers. The open family keeps its own until it is opened again.
  void setHostBudget(qint64 bytes);
  // Re-plans the resident experts for a budget (bytes) and policy ("round-robin", "medoid", "weighted",
  // with `shares` per variant in the family's order; empty: alike).
  void planLayout(qint64 budgetBytes, const QString& policy, const mosaic::ui::ReserveSettings& reserve = {},
                  const QVector<double>& shares = {});
  // Virtual experts (SwapMoE) for a budget: per-layer counts planned on the text in `calibration`
  // (a file; empty: uniform counts), served with sets that follow the traffic.
  void planVirtual(qint64 budgetBytes, const mosaic::ui::ReserveSettings& reserve, const QString& calibration);
  // A what-if layout for the family in `dir` (variant folders) from their config.json files alone:
  // no family need be open and no weights are read. Reported by configLayoutPlanned (or layoutFailed);
  // the open family's layout and what serves stay as they are.
  void planFromConfigs(const QString& dir, qint64 budgetBytes, const QString& policy, const mosaic::ui::ReserveSettings& reserve = {},
                       const QVector<double>& shares = {});
  // A layout file (mosaic.layout/1) served instead of the planned one, or the current one saved.
  void importLayout(const QString& file);
  void exportLayout(const QString& file);
  // Streams `target`'s next turn of `conversation` (user and assistant turns, the last the user's),
  // served with the current layout: the turns written as the variant's chat template writes them
  // where its folder (or its base's) has one, else as plain "role: content" lines — as `serve` does.
  // `seed`: the draw's at temperature > 0. max_new_tokens is cut to what the model's context leaves
  // after the prompt (the summary says so); a conversation that fills the context fails.
  void chat(const QString& target, const QVector<mosaic::ui::ChatTurn>& conversation, int maxNewTokens, double temperature, double topP,
            quint64 seed = 0);
  void stopChat();
  // One prompt to two sides at once (0: left, 1: right), each a variant served as the layout on
  // screen serves it or, `own`, through its own checkpoint alone (the single-model reference forward
  // pass; full checkpoints only). Both sample with one seed, so they differ only where weights do.
  void compare(const QString& left, bool leftOwn, const QString& right, bool rightOwn, const QString& prompt, int maxNewTokens,
               double temperature, double topP);
  void stopCompare();
  // A heatmap of the open family's distances: Position (d(l, e)), Pair (variants a and b per
  // position) or Cross (a's positions against b's, within `layer`, or all when layer < 0).
  void requestHeatmap(mosaic::ui::Heatmap::Kind kind, int a, int b, int layer);
  // Routes `text` through every variant (each with its own tokenizer and router, served as the
  // layout serves it) and counts each layer's expert choices.
  void requestUsage(const QString& text);
  // The runs recorded in a SQLite file (all of them), and a report of some: tables written here,
  // then reportDataReady so that the GUI thread draws the charts (QCustomPlot is a widget).
  void loadRuns(const QString& database);
  // Runs a sweep (mosaic.sweep/1 JSON; its variants are the open family's, whatever it lists) on
  // the open family, recording every run to `database`. Until it ends, other engine work waits.
  void startServing(const QString& sweepJson, const QString& database);
  void stopServing();
  // Serves the open session over the OpenAI-compatible HTTP API (mosaic-cli serve's), beside the
  // chat; every finished request arrives as servedRequest (strategy "serve") and is recorded to
  // `settings.database` when it names one. Layouts stay as they are until it stops; opening another
  // family stops it first.
  void startHttpServer(const mosaic::ui::HttpSettings& settings);
  void stopHttpServer();
  void exportReport(const QString& database, const QList<qint64>& runs, const QString& dir);
  // The recorded routes of request `request` (its index in the workload) of a traced run.
  void loadTrace(const QString& database, qint64 run, qint64 request);

 Q_SIGNALS:
  void progress(const QString& stage, int done, int total);
  void familyOpened(const mosaic::ui::FamilyInfo& family);
  // A family changed while it served (HTTP or chat): how, in a sentence (in place, or rebuilt and why).
  void familyChangeServed(const QString& summary);
  void layoutPlanned(const mosaic::ui::LayoutInfo& layout);
  void configLayoutPlanned(const mosaic::ui::LayoutInfo& layout);
  void chatToken(const mosaic::ui::TokenTrace& token);
  // `rest`: text the last token left held back (a character it cut short), shown before the summary.
  void chatFinished(const QString& rest, const QString& summary);
  void compareToken(int side, qint64 token, const QString& text);
  void compareFinished(int side, const QString& rest, const QString& summary);
  void compareFailed(int side, const QString& message);
  void heatmapReady(const mosaic::ui::Heatmap& heatmap);
  void usageReady(const mosaic::ui::ExpertUsage& usage);
  void runsLoaded(const mosaic::ReportData& runs);
  void servingRunStarted(const QString& strategy, double rate, qint64 runId, int requests);
  // Rates from saturation: each strategy's measured rate and the rates chosen, in a sentence.
  void servingRatesChosen(const QString& summary);
  // A strategy's saturation burst, before the runs: `done` of its `total` requests finished.
  void servingProbeProgress(const QString& strategy, int done, int total);
  void servedRequest(const mosaic::ui::ServedPoint& point);
  void servingFinished(const QString& summary, const QString& database);
  void reportDataReady(const mosaic::ReportData& data, const QString& dir);
  // The server listens at `url` (…/v1), serving `models`, recording to run `runId` (0: not recorded).
  void httpServerStarted(const QString& url, qint64 runId, const QStringList& models);
  // The family changed while serving: the server now serves `models` (its clients carried on).
  void httpServerModels(const QStringList& models);
  void httpServerStopped(const QString& summary, const QString& database);
  void httpServerFailed(const QString& message);
  // A recorded request's trace: `labels` per position (prompt, then output tokens).
  void traceLoaded(const QString& title, const QString& target, int layers, const QStringList& labels,
                   const QVector<mosaic::ui::ExpertRoute>& routes);
  // `cudaDescription`: the GPU ("NVIDIA H100 80GB HBM3, 79.2 GiB, compute 9.0"), or empty with
  // `cudaUnavailable` saying why none can be used.
  void devicesProbed(const QString& cudaDescription, const QString& cudaUnavailable);
  void deviceChanged(const QString& device);  // "cpu" or "cuda"
  void deviceFailed(const QString& message, const QString& device);  // `device`: the one still serving
  void cpuWeightsChanged(const QString& weights);
  void cpuWeightsFailed(const QString& message, const QString& weights);  // `weights`: the way still in use
  // Engine errors, as messages that say what to do.
  void familyFailed(const QString& message);
  void layoutFailed(const QString& message);
  void layoutExported(const QString& file);
  void chatFailed(const QString& message);
  void heatmapFailed(const QString& message);
  void usageFailed(const QString& message);
  void runsFailed(const QString& message);
  void servingFailed(const QString& message);

 private:
  struct State;
  void post(std::function<void()> work);
  void startPendingHttp();  // on the engine host's thread, after a plan succeeded
  void serveChangedFamily(std::unique_ptr<Session> opened, qint64 budgetBytes, const QString& policy, const ReserveSettings& reserve,
                          const QVector<double>& shares);
  QThread thread_;
  QObject* context_ = nullptr;  // lives on thread_: queued work runs there
  std::unique_ptr<State> state_;  // touched only on thread_
  std::atomic<bool> cancel_open_{false};
  std::atomic<bool> stop_serving_{false};
};

}  // namespace mosaic::ui
