#include "workbench/layout_panel.h"
#include "workbench/file_dialogs.h"

#include <QRegularExpression>

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QGridLayout>
#include <QPushButton>
#include <QLabel>
#include <QHeaderView>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>
#include <filesystem>

#include "common/install_paths.h"
#include "workbench/byte_size_box.h"
#include "workbench/family_panel.h"
#include "workbench/flow_layout.h"
#include "workbench/layout_grid.h"

namespace mosaic::ui {

LayoutPanel::LayoutPanel(QWidget* parent) : QWidget(parent), grid_(new LayoutGrid), debounce_(new QTimer(this)) {
  budget_ = new ByteSizeBox;
  // Blank until a family's layout says what it is (0 plans the default budget, as Session does).
  budget_->setMinimum(0);
  budget_->setSpecialValueText(QStringLiteral(" "));
  budget_->setValue(0);
  policy_ = new QComboBox;
  policy_->addItems({QStringLiteral("round-robin"), QStringLiteral("medoid"), QStringLiteral("weighted"), QStringLiteral("hybrid")});
  policy_->setItemData(3, tr("Delta folders over their base: the base's copy everywhere, the folders' deltas at the least similar "
                             "positions, as many as the budget holds"), Qt::ToolTipRole);
  policy_->addItem(QStringLiteral("virtual"));
  policy_->setItemData(4, tr("SwapMoE's virtual experts: per layer a few resident experts that change with the traffic, the router "
                             "choosing only among them; counts planned on calibration text (or uniform without one)"), Qt::ToolTipRole);
  setHybridEnabled(false);  // until a family with delta folders is planned
  auto spin = [](int lo, int hi, int value, const QString& suffix, const QString& tip) {
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setValue(value);
    s->setSuffix(suffix);
    s->setToolTip(tip);
    s->setKeyboardTracking(false);
    return s;
  };
  const ReserveSettings defaults;
  context_ = spin(1, 1 << 20, static_cast<int>(defaults.context), tr(" tokens of context"), tr("KV cache length of each request"));
  requests_ = spin(1, 4096, static_cast<int>(defaults.requests), QString(), tr("requests holding a KV cache at once"));
  requests_->setPrefix(tr("requests at once: "));
  prefill_ = spin(1, 1 << 16, static_cast<int>(defaults.prefill_chunk), tr(" tokens per step"),
                  tr("the most tokens one engine step runs: sizes the activation workspace"));
  miss_slots_ = spin(-1, 4096, static_cast<int>(defaults.miss_slots), tr(" miss slots"), tr("expert slots kept free for on-demand loads"));
  miss_slots_->setSpecialValueText(tr("top-k miss slots"));
  shares_ = new QTableWidget(0, 2);
  shares_->setHorizontalHeaderLabels({tr("Variant"), tr("Traffic share")});
  shares_->horizontalHeader()->setStretchLastSection(true);
  shares_->verticalHeader()->hide();
  shares_->setMaximumHeight(140);
  shares_->setToolTip(tr("Relative traffic each variant is expected to get: a variant with share 2 gets about twice the "
                         "resident positions of one with share 1. Double-click a share to edit it."));
  shares_->hide();
  calibration_ = new QLineEdit;
  calibration_->setPlaceholderText(tr("calibration text: none = uniform counts"));
  calibration_->setToolTip(tr("Text in the serving domain. Each layer's loss at every count is measured on it and the counts that "
                              "lose the least within the budget are chosen (a few seconds on the sample family)"));
  auto* browse = new QPushButton(tr("Text…"));
  calibration_row_ = new QWidget;
  auto* calibrationLayout = new QHBoxLayout(calibration_row_);
  calibrationLayout->setContentsMargins(0, 0, 0, 0);
  calibrationLayout->addWidget(calibration_, 1);
  calibrationLayout->addWidget(browse);
  calibration_row_->hide();
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString f = remembered(QFileDialog::getOpenFileName(this, tr("Calibration text"), startFolder(), tr("Text (*.txt);;All files (*)")));
    if (f.isEmpty()) return;
    calibration_->setText(f);
    debounce_->start();
  });
  connect(calibration_, &QLineEdit::editingFinished, this, [this] {
    if (!updating_) debounce_->start();
  });
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  legend_ = new QLabel;
  legend_->setTextFormat(Qt::RichText);
  legend_->setWordWrap(true);
  auto* importButton = new QPushButton(tr("Import layout…"));
  auto* exportButton = new QPushButton(tr("Export layout…"));
  auto* configButton = new QPushButton(tr("Plan from configs…"));
  configButton->setToolTip(tr("Plan a budget for a family too large to open here (e.g. sample_configs/families/mixtral-8x7b): "
                              "only its variants' config.json files are read"));
  files_ = new QWidget;
  auto* fileButtons = new QHBoxLayout(files_);
  fileButtons->setContentsMargins(0, 0, 0, 0);
  fileButtons->addWidget(importButton);
  fileButtons->addWidget(exportButton);
  auto* files = new FlowLayout;  // wraps in a narrow dock
  files->addWidget(policy_);
  files->addWidget(files_);
  files->addWidget(configButton);
  config_label_ = new QLabel;
  config_label_->setWordWrap(true);
  auto* leave = new QPushButton(tr("Back to the open family"));
  config_bar_ = new QWidget;
  auto* configRow = new QHBoxLayout(config_bar_);
  configRow->setContentsMargins(0, 0, 0, 0);
  configRow->addWidget(config_label_, 1);
  configRow->addWidget(leave);
  config_bar_->hide();
  connect(configButton, &QPushButton::clicked, this, [this] {
    // Where the shipped what-ifs are (Mixtral-8x7B, DeepSeek, …), else the last folder used.
    const std::filesystem::path shipped = shipped_data_dir() / "sample_configs" / "families";
    const QString from = std::filesystem::is_directory(shipped) ? QString::fromStdString(shipped.string()) : startFolder();
    const QString dir = remembered(QFileDialog::getExistingDirectory(this, tr("A family's folder (variant folders with config.json)"), from));
    if (!dir.isEmpty()) openConfigFamily(dir);
  });
  connect(leave, &QPushButton::clicked, this, &LayoutPanel::leaveConfigFamily);
  auto* form = new QFormLayout;
  budget_note_ = new QLabel;  // why the budget did not plan, beside it
  budget_note_->setWordWrap(true);
  budget_note_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  budget_note_->hide();
  connect(budget_, &ByteSizeBox::refused, this, [this](const QString& why) {
    budget_note_->setText(why);
    budget_note_->show();
  });
  auto* budgetRow = new QVBoxLayout;
  budgetRow->setContentsMargins(0, 0, 0, 0);
  budgetRow->addWidget(budget_);
  budgetRow->addWidget(budget_note_);
  form->addRow(tr("Device budget"), budgetRow);
  // Each wrapping row in a widget of its own: as a bare layout in the form, its lines were counted at
  // some widths from its one-line size hint, and the next row was drawn over its second line.
  auto* filesBox = new QWidget;
  filesBox->setLayout(files);
  form->addRow(tr("Policy"), filesBox);
  auto* reserveRow = new FlowLayout;
  for (QWidget* w : {static_cast<QWidget*>(context_), static_cast<QWidget*>(requests_), static_cast<QWidget*>(prefill_), static_cast<QWidget*>(miss_slots_)})
    reserveRow->addWidget(w);
  auto* reserveBox = new QWidget;
  reserveBox->setLayout(reserveRow);
  form->addRow(tr("Reserve"), reserveBox);
  form->addRow(shares_);
  form->addRow(calibration_row_);
  connect(importButton, &QPushButton::clicked, this, [this] {
    const QString f = remembered(QFileDialog::getOpenFileName(this, tr("Import a layout"), startFolder(), tr("Layouts (*.json)")));
    if (!f.isEmpty()) Q_EMIT importRequested(f);
  });
  connect(exportButton, &QPushButton::clicked, this, [this] {
    const QString f = remembered(QFileDialog::getSaveFileName(this, tr("Export the layout"), inStartFolder(QStringLiteral("layout.json")), tr("Layouts (*.json)")));
    if (!f.isEmpty()) Q_EMIT exportRequested(f);
  });
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(config_bar_);
  layout->addLayout(form);
  layout->addWidget(grid_, 1);
  layout->addWidget(legend_);
  layout->addWidget(summary_);

  // Dragging the spin box fires many changes: plan once it rests for a moment.
  debounce_->setSingleShot(true);
  debounce_->setInterval(150);
  connect(debounce_, &QTimer::timeout, this, [this] {
    if (!config_family_.isEmpty())
      Q_EMIT configPlanRequested(config_family_, budgetBytes(), policy_->currentText(), reserve(), shares());
    else if (policy_->currentText() == QStringLiteral("virtual"))
      Q_EMIT planVirtualRequested(budgetBytes(), reserve(), calibration_->text().trimmed());
    else
      Q_EMIT planRequested(budgetBytes(), policy_->currentText(), reserve(), shares());
  });
  connect(shares_, &QTableWidget::itemChanged, this, [this] {
    if (!updating_) debounce_->start();
  });
  for (QSpinBox* s : {context_, requests_, prefill_, miss_slots_})
    connect(s, &QSpinBox::valueChanged, this, [this] {
      if (!updating_) debounce_->start();
    });
  connect(budget_, &QDoubleSpinBox::valueChanged, this, [this] {
    if (!updating_) debounce_->start();
  });
  connect(policy_, &QComboBox::currentTextChanged, this, [this](const QString& p) {
    shares_->setVisible(p == QStringLiteral("weighted"));
    calibration_row_->setVisible(p == QStringLiteral("virtual"));
    miss_slots_->setEnabled(p != QStringLiteral("virtual"));  // masked gating never loads a miss
    if (!updating_) debounce_->start();
  });
}

QString LayoutPanel::summaryText() const { return summary_->text(); }
QString LayoutPanel::policy() const { return policy_->currentText(); }

ReserveSettings LayoutPanel::reserve() const {
  return {context_->value(), requests_->value(), prefill_->value(), miss_slots_->value()};
}

QVector<double> LayoutPanel::shares() const {
  if (policy_->currentText() != QStringLiteral("weighted")) return {};
  QVector<double> out;
  for (int row = 0; row < shares_->rowCount(); ++row) out << shares_->item(row, 1)->data(Qt::EditRole).toDouble();
  return out;
}

void LayoutPanel::presetPlan(const QString& policy, const ReserveSettings& r, const QVector<double>& shares) {
  debounce_->stop();
  updating_ = true;
  policy_->setCurrentText(policy);
  context_->setValue(static_cast<int>(r.context));
  requests_->setValue(static_cast<int>(r.requests));
  prefill_->setValue(static_cast<int>(r.prefill_chunk));
  miss_slots_->setValue(static_cast<int>(r.miss_slots));
  for (int row = 0; row < shares_->rowCount() && row < shares.size(); ++row) shares_->item(row, 1)->setData(Qt::EditRole, shares[row]);
  updating_ = false;
}

qint64 LayoutPanel::budgetBytes() const { return budget_->bytes(); }

void LayoutPanel::setHybridEnabled(bool on) {
  if (auto* model = qobject_cast<QStandardItemModel*>(policy_->model())) model->item(3)->setEnabled(on);
}

namespace {

// What a virtual-experts layout keeps and why: the per-layer counts, the updates, and (planned on
// calibration text) the perplexity the planner measured against uniform counts of the same bytes.
QString virtualSummary(const LayoutInfo& l) {
  QStringList counts;
  for (int c : l.virtual_counts) counts << (c > 0 ? QString::number(c) : QStringLiteral("·"));
  QString s = LayoutPanel::tr("Virtual experts: %1 of %2 per layer for each variant (%3 resident, %4 each); sets updated every %5 steps "
                              "through %6 staging slot(s) per layer")
                  .arg(counts.join(QLatin1Char('/')))
                  .arg(l.experts)
                  .arg(l.capacity)
                  .arg(formatBytes(l.bytes_per_expert))
                  .arg(l.virtual_update_every)
                  .arg(l.virtual_staging);
  if (l.virtual_full_nll > 0)
    s += LayoutPanel::tr(" · calibration perplexity %1 planned, %2 with %3 per layer uniformly, %4 with every expert")
             .arg(std::exp(l.virtual_planned_nll), 0, 'f', 2)
             .arg(std::exp(l.virtual_uniform_nll), 0, 'f', 2)
             .arg(l.virtual_uniform_count)
             .arg(std::exp(l.virtual_full_nll), 0, 'f', 2);
  else
    s += LayoutPanel::tr(" · uniform counts (give a calibration text to plan them)");
  return s;
}

}  // namespace

void LayoutPanel::openConfigFamily(const QString& dir) {
  const bool entering = config_family_ != dir;
  config_family_ = dir;
  debounce_->stop();
  if (entering) {  // the open family's grid is not this one's, not even faded
    grid_->setLayoutInfo(LayoutInfo{});
    grid_->setStale(tr("Planning %1 from its configs…").arg(QFileInfo(dir).fileName()));
  }
  // Another family needs another budget: it starts from its own default (0), shown once planned.
  Q_EMIT configPlanRequested(config_family_, entering ? 0 : budgetBytes(), policy_->currentText(), reserve(), shares());
}

void LayoutPanel::leaveConfigFamily() {
  if (config_family_.isEmpty()) return;
  config_family_.clear();
  config_bar_->hide();
  files_->setEnabled(true);
  updating_ = true;
  budget_->setBytes(family_budget_);  // the open family's budget, not the what-if's
  updating_ = false;
  Q_EMIT configFamilyLeft();
}

void LayoutPanel::showLayout(const LayoutInfo& l) {
  // A plan of the open family while planning from configs (it finished opening) ends the what-if.
  config_family_ = l.config_family;
  if (config_family_.isEmpty()) family_budget_ = l.budget;
  config_bar_->setVisible(!config_family_.isEmpty());
  files_->setEnabled(config_family_.isEmpty());
  config_label_->setText(tr("Planning <b>%1</b> from its config.json files: no weights read, so no expert distances; the resident "
                            "positions are spread evenly over the layers. Nothing here is served.")
                             .arg(QFileInfo(config_family_).fileName().toHtmlEscaped()));
  updating_ = true;
  setHybridEnabled(l.can_plan_hybrid);
  // The reserve's KV is cut to the model's context (runtime/capacity.h): say so where more is asked.
  const bool capped = l.model_context > 0 && context_->value() > l.model_context;
  // (Said as a cap: "the model holds 512" beside 4096 read as two contradicting settings.)
  context_->setSuffix(capped ? tr(" tokens of context, capped at %1").arg(l.model_context) : tr(" tokens of context"));
  context_->setToolTip(capped ? tr("KV cache length of each request: this layout reserves the model's whole context, %1 tokens, "
                                   "and no more, whatever is asked here")
                                    .arg(l.model_context)
                              : tr("KV cache length of each request"));
  // A plan that arrives while an edit waits to be planned is older than the edit: it must not put
  // the boxes back, or the pending plan would be made with the old policy and budget.
  if (!debounce_->isActive()) {
    budget_->setBytes(l.budget);
    policy_->setCurrentText(l.policy);
  }
  // One row per variant of this layout; a variant keeps the share it had, a new one weighs 1.
  QHash<QString, double> kept;
  for (int row = 0; row < shares_->rowCount(); ++row) kept[shares_->item(row, 0)->text()] = shares_->item(row, 1)->data(Qt::EditRole).toDouble();
  shares_->setRowCount(static_cast<int>(l.variants.size()));
  for (int v = 0; v < l.variants.size(); ++v) {
    auto* name = new QTableWidgetItem(l.variants[v]);
    name->setFlags(Qt::ItemIsEnabled);
    shares_->setItem(v, 0, name);
    auto* share = new QTableWidgetItem;
    // The plan's shares are normalized: shown as entered, the plan's only where none was.
    share->setData(Qt::EditRole, kept.value(l.variants[v], l.shares.size() == l.variants.size() ? l.shares[v] * l.variants.size() : 1.0));
    shares_->setItem(v, 1, share);
  }
  updating_ = false;
  grid_->setLayoutInfo(l);
  grid_->setStale({});
  QString legend;
  for (int v = 0; v < l.variants.size(); ++v)
    // Non-breaking inside an entry, ordinary spaces between entries: the legend wraps to the panel.
    legend += QStringLiteral("<span style='color:%1'>■</span>&nbsp;%2&nbsp;(%3) &nbsp; ")
                  .arg(variantColor(v).name(), l.variants[v].toHtmlEscaped().replace(QLatin1Char('-'), QChar(0x2011)))  // no break at '-' 
                  .arg(l.resident_counts.value(v));
  const bool hybrid = !l.deltas.isEmpty();
  legend_->setText(legend + (hybrid ? tr("<b>Δ</b>&nbsp;deltas&nbsp;resident (plain: shared&nbsp;base&nbsp;copy)")
                                    : tr("<span style='color:#999'>▨</span>&nbsp;not&nbsp;resident")));
  QString reserve;
  for (const ReserveLine& r : l.reserve) reserve += tr("\n  %1: %2 — %3").arg(r.name, formatBytes(r.bytes), r.detail);
  QString head =
      hybrid ? tr("Hybrid: the base's copy at all %1 positions (%2 each) · deltas of %3 folders at %4 positions (%5 of %6 deltas, %7 packed); "
                  "the rest share the base's copy")
                   .arg(l.positions)
                   .arg(formatBytes(l.bytes_per_expert))
                   .arg(l.delta_folders)
                   .arg(l.delta_positions)
                   .arg(l.deltas_resident)
                   .arg(l.deltas_total)
                   .arg(formatBytes(l.delta_bytes))
             : tr("Capacity %1 of %2 expert positions resident (%3 each)").arg(l.capacity).arg(l.positions).arg(formatBytes(l.bytes_per_expert));
  if (!l.virtual_counts.isEmpty()) head = virtualSummary(l);
  const QString host = l.host_budget > 0 ? tr("host budget %1").arg(formatBytes(l.host_budget)) : tr("no host budget");
  const QString tiers = tr("Tiers: device %1 (this layout) · RAM %2 (%3) · disk %4 · of %5 distinct%6")
                            .arg(formatBytes(l.device_bytes), formatBytes(l.ram_bytes), host, formatBytes(l.disk_bytes), formatBytes(l.distinct_bytes),
                                 l.distinct_assumed ? tr(" (configs: no tensor assumed shared)") : QString());
  QString sets;
  if (l.config_family.isEmpty()) {
    sets = tr(" · %n non-expert set(s) resident", "", l.resident_sets);
    if (l.positions_for_sets > 0) sets += tr(" (%n position(s) given up for the second: swaps then overlap decode)", "", static_cast<int>(l.positions_for_sets));
  }
  budget_note_->hide();
  summary_->setText(tr("%1 · non-expert %2 · minimum budget %3%4\n%5\nReserve:%6")
                        .arg(head, formatBytes(l.non_expert_bytes), formatBytes(l.minimum_budget), sets, tiers, reserve));
  summary_->setStyleSheet(QString());
}

QString LayoutPanel::budgetNote() const { return budget_note_->isHidden() ? QString() : budget_note_->text(); }

void LayoutPanel::showError(const QString& what, const QString& message) {
  summary_->setText(what + QStringLiteral(": ") + message);
  // A budget below the minimum is said beside the budget, with the minimum, in a few words.
  static const QRegularExpression minimum(QStringLiteral("minimum of ([0-9.]+ [KMGT]?i?B)"));
  const QRegularExpressionMatch m = minimum.match(message);
  const QString shown = grid_->layoutInfo().layers > 0 ? tr(" (showing the previous layout)") : QString();
  const QString brief = m.hasMatch() ? tr("Budget too small: minimum %1%2").arg(m.captured(1), shown) : tr("Not planned%1: see below").arg(shown);
  budget_note_->setText(brief);
  budget_note_->show();
  // The grid still shows the last layout that was planned: say so on it, not only below it.
  if (grid_->layoutInfo().layers > 0) grid_->setStale(brief);
  summary_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
}

}  // namespace mosaic::ui
