#pragma once
// Plain values the engine thread hands to the GUI through queued signals: copies, never pointers
// into engine state, so the GUI can keep them as long as it likes.
#include <QList>
#include <QMetaType>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>

#include "store/report_data.h"

namespace mosaic::ui {

struct VariantInfo {
  QString name, dir, architecture, dtypes;
  qint64 parameters = 0, active_parameters = 0, bytes = 0, non_expert_bytes = 0;
  int adapter_experts = 0;  // > 0: an ESFT adapter tuning this many experts over its base
  QString delta;            // a delta folder: its format; else empty
};

struct FamilyInfo {
  QList<VariantInfo> variants;
  int layers = 0, experts = 0, top_k = 0;
  qint64 bytes_per_expert = 0;
  bool distances_from_cache = false;
  qint64 host_bytes = 0;   // the distinct weight bytes (each tensor held once)
  qint64 host_budget = 0;  // of them, the most kept in RAM; 0: every one
};

struct ReserveLine {
  QString name, detail;
  qint64 bytes = 0;
};

// What the budget keeps beside the experts, as the Layout panel sets it (analysis/capacity.h's
// ReserveSpec): KV for `context` tokens × `requests`, activations for a `prefill_chunk`, and
// `miss_slots` free slots (−1: top-k).
struct ReserveSettings {
  qint64 context = 4096, requests = 1, prefill_chunk = 512, miss_slots = -1;
};

// The workbench's OpenAI-compatible server: what `mosaic-cli serve` takes as options.
struct HttpSettings {
  QString host = QStringLiteral("127.0.0.1");
  int port = 8000;  // 0: any free port
  QString api_key;  // empty: none asked for
  int max_requests = 64;
  bool plain_chat = false;  // 'role: content' lines even where a model has a chat template
  QString database;  // where requests are recorded (a run of strategy "serve"); empty: nowhere
};

struct LayoutInfo {
  // Planned from the config.json files in this folder alone (a family too large to open): no
  // distances, positions spread evenly; empty for the open family's layout.
  QString config_family;
  QStringList variants;
  int layers = 0, experts = 0;
  QVector<int> resident;  // [layer * experts + expert]: variant whose copy is resident, -1 none
  QVector<double> distance;  // d(l, e), NaN in dense layers
  QVector<int> resident_counts;  // per variant
  qint64 budget = 0, capacity = 0, positions = 0, minimum_budget = 0, non_expert_bytes = 0, bytes_per_expert = 0;
  QList<ReserveLine> reserve;
  ReserveSettings reserve_settings;  // what the reserve was planned from
  qint64 model_context = 0;  // the model's max_position_embeddings (0: unknown): a request's KV never holds more
  QString policy;
  QVector<double> shares;  // weighted: each variant's traffic share, normalized; else empty
  // Hybrid (delta folders over their base): per cell, how many folders' deltas are resident; else empty.
  QVector<int> deltas;
  bool can_plan_hybrid = false;  // the family has delta folders over one base it holds
  // Virtual experts (policy "virtual"): resident experts per layer of each variant, the text the
  // counts were planned on (empty: uniform counts), and what the planner measured (mean NLL).
  QVector<int> virtual_counts;
  QString virtual_calibration;
  qint64 virtual_update_every = 0, virtual_staging = 0, virtual_uniform_count = 0;
  double virtual_full_nll = 0, virtual_planned_nll = 0, virtual_uniform_nll = 0;
  int delta_folders = 0;
  qint64 deltas_resident = 0, deltas_total = 0, delta_positions = 0, delta_bytes = 0;
  // The three tiers (analysis/capacity.h, TierBytes): what this layout keeps on the device, what the
  // host tier keeps in RAM (host_budget 0: every distinct byte) and what stays on disk. A family
  // planned from configs knows no shared tensors: its distinct bytes assume none (distinct_assumed).
  qint64 device_bytes = 0, ram_bytes = 0, disk_bytes = 0, distinct_bytes = 0, host_budget = 0;
  bool distinct_assumed = false;
  // Non-expert sets resident at once (resident sets auto: what the budget holds beside the layout),
  // and the expert positions the plan gave up to leave room for the second (capacity.h's rule).
  int resident_sets = 1;
  qint64 positions_for_sets = 0;
};

// Where one router choice of the token at `position` went (core's RoutedExpert, names resolved).
struct ExpertRoute {
  enum class Outcome { Hit, Miss, Dropped };
  int position = 0;  // in the sequence: the prompt's tokens first
  int layer = 0, expert = 0;
  Outcome outcome = Outcome::Hit;
  QString served_by;      // the variant or adapter whose copy ran; empty when dropped
  int served_expert = -1;
};

// One turn of a chat: "user" or "assistant", and what was said.
struct ChatTurn {
  QString role, content;
};

// One streamed token with what its forward pass did: per MoE layer hits and misses, swaps, and
// where each router choice of the step's tokens went.
struct TokenTrace {
  QString text;
  qint64 token = -1;
  int position = -1;          // this token's position in the sequence
  QVector<int> hits, misses;  // per layer, for this token's step alone
  QVector<int> disk;          // per layer: of the step's expert loads, those read from disk (host budget)
  qint64 swaps = 0;           // non-expert swaps during this step (the first token carries the request's)
  QVector<ExpertRoute> routes;  // the step's: the prompt's for the first token, else the previous token's
  QStringList prompt;           // the first token only: the prompt's tokens as text
};

// How often each variant's router chose each expert over one text: the evidence behind a budget
// (experts rarely chosen are cheap to leave out).
struct ExpertUsage {
  QStringList variants;
  int layers = 0, experts = 0;
  QVector<qint64> counts;  // [variant][layer][expert]: top-k choices
  QVector<qint64> tokens;  // per variant: the text's tokens under its tokenizer
  // The layout serves with masked gating (virtual experts, a fixed resident set): the choices
  // counted are among the resident experts only, not what the routers alone would choose.
  bool masked = false;
  qint64 count(int v, int l, int e) const { return counts.value((static_cast<qsizetype>(v) * layers + l) * experts + e); }
};

// A matrix to draw as a heatmap. Position and pair maps: rows are layers, columns experts. The
// cross-position map (the paper's Figure 2): rows are A's positions, columns B's, both listed in
// `positions` as (layer, expert).
struct Heatmap {
  enum class Kind { Position, Pair, Cross } kind = Kind::Position;
  QString title, row_label, column_label;
  int rows = 0, columns = 0;
  QVector<double> values;  // row-major; NaN where undefined (dense layers)
  QVector<QPair<int, int>> positions;  // Cross only
};

// One finished request of a serving run, as the dashboard charts it.
struct ServedPoint {
  QString strategy, target;
  double rate = 0;              // the run's arrival rate, requests/s
  qint64 run_id = 0;
  double finish = 0, ttft = 0, turnaround = 0;  // seconds (finish: from the run's start)
  qint64 output_tokens = 0, swaps = 0;
  QVector<int> hits, misses;    // per layer
  int done = 0, total = 0;      // requests finished in the run so far, of
  QString outcome = QStringLiteral("completed");  // or "cancelled", "failed"
};

}  // namespace mosaic::ui

Q_DECLARE_METATYPE(mosaic::ui::ServedPoint)
Q_DECLARE_METATYPE(mosaic::ui::Heatmap)
Q_DECLARE_METATYPE(mosaic::ReportData)
Q_DECLARE_METATYPE(mosaic::ui::FamilyInfo)
Q_DECLARE_METATYPE(mosaic::ui::LayoutInfo)
Q_DECLARE_METATYPE(mosaic::ui::ReserveSettings)
Q_DECLARE_METATYPE(mosaic::ui::HttpSettings)
Q_DECLARE_METATYPE(mosaic::ui::TokenTrace)
Q_DECLARE_METATYPE(mosaic::ui::ExpertUsage)
Q_DECLARE_METATYPE(mosaic::ui::ExpertRoute)
