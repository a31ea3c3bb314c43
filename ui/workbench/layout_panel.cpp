#include "workbench/layout_panel.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSpinBox>
#include <QGridLayout>
#include <QPushButton>
#include <QLabel>
#include <QTimer>
#include <QVBoxLayout>

#include "workbench/byte_size_box.h"
#include "workbench/family_panel.h"
#include "workbench/layout_grid.h"

namespace mosaic::ui {

LayoutPanel::LayoutPanel(QWidget* parent) : QWidget(parent), grid_(new LayoutGrid), debounce_(new QTimer(this)) {
  budget_ = new ByteSizeBox;
  policy_ = new QComboBox;
  policy_->addItems({QStringLiteral("round-robin"), QStringLiteral("medoid"), QStringLiteral("weighted")});
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
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  legend_ = new QLabel;
  legend_->setTextFormat(Qt::RichText);
  legend_->setWordWrap(true);
  auto* importButton = new QPushButton(tr("Import layout…"));
  auto* exportButton = new QPushButton(tr("Export layout…"));
  auto* files = new QHBoxLayout;
  files->addWidget(policy_, 1);
  files->addWidget(importButton);
  files->addWidget(exportButton);
  auto* form = new QFormLayout;
  form->addRow(tr("Device budget"), budget_);
  form->addRow(tr("Policy"), files);
  auto* reserveRow = new QGridLayout;
  reserveRow->addWidget(context_, 0, 0);
  reserveRow->addWidget(requests_, 0, 1);
  reserveRow->addWidget(prefill_, 1, 0);
  reserveRow->addWidget(miss_slots_, 1, 1);
  form->addRow(tr("Reserve"), reserveRow);
  connect(importButton, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Import a layout"), {}, tr("Layouts (*.json)"));
    if (!f.isEmpty()) Q_EMIT importRequested(f);
  });
  connect(exportButton, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export the layout"), QStringLiteral("layout.json"), tr("Layouts (*.json)"));
    if (!f.isEmpty()) Q_EMIT exportRequested(f);
  });
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(grid_, 1);
  layout->addWidget(legend_);
  layout->addWidget(summary_);

  // Dragging the spin box fires many changes: plan once it rests for a moment.
  debounce_->setSingleShot(true);
  debounce_->setInterval(150);
  connect(debounce_, &QTimer::timeout, this, [this] { Q_EMIT planRequested(budgetBytes(), policy_->currentText(), reserve()); });
  for (QSpinBox* s : {context_, requests_, prefill_, miss_slots_})
    connect(s, &QSpinBox::valueChanged, this, [this] {
      if (!updating_) debounce_->start();
    });
  connect(budget_, &QDoubleSpinBox::valueChanged, this, [this] {
    if (!updating_) debounce_->start();
  });
  connect(policy_, &QComboBox::currentTextChanged, this, [this] {
    if (!updating_) debounce_->start();
  });
}

QString LayoutPanel::summaryText() const { return summary_->text(); }
QString LayoutPanel::policy() const { return policy_->currentText(); }

ReserveSettings LayoutPanel::reserve() const {
  return {context_->value(), requests_->value(), prefill_->value(), miss_slots_->value()};
}

qint64 LayoutPanel::budgetBytes() const { return budget_->bytes(); }

void LayoutPanel::showLayout(const LayoutInfo& l) {
  updating_ = true;
  budget_->setBytes(l.budget);
  policy_->setCurrentText(l.policy);
  updating_ = false;
  grid_->setLayoutInfo(l);
  grid_->setStale({});
  QString legend;
  for (int v = 0; v < l.variants.size(); ++v)
    // Non-breaking inside an entry, ordinary spaces between entries: the legend wraps to the panel.
    legend += QStringLiteral("<span style='color:%1'>■</span>&nbsp;%2&nbsp;(%3) &nbsp; ")
                  .arg(variantColor(v).name(), l.variants[v].toHtmlEscaped().replace(QLatin1Char('-'), QChar(0x2011)))  // no break at '-' 
                  .arg(l.resident_counts.value(v));
  legend_->setText(legend + tr("<span style='color:#999'>▨</span>&nbsp;not&nbsp;resident"));
  QString reserve;
  for (const ReserveLine& r : l.reserve) reserve += tr("\n  %1: %2 — %3").arg(r.name, formatBytes(r.bytes), r.detail);
  summary_->setText(tr("Capacity %1 of %2 expert positions resident (%3 each) · non-expert %4 · minimum budget %5\nReserve:%6")
                        .arg(l.capacity)
                        .arg(l.positions)
                        .arg(formatBytes(l.bytes_per_expert))
                        .arg(formatBytes(l.non_expert_bytes))
                        .arg(formatBytes(l.minimum_budget))
                        .arg(reserve));
  summary_->setStyleSheet(QString());
}

void LayoutPanel::showError(const QString& what, const QString& message) {
  summary_->setText(what + QStringLiteral(": ") + message);
  // The grid still shows the last layout that was planned: say so on it, not only below it.
  if (grid_->layoutInfo().layers > 0) grid_->setStale(tr("Not planned: %1. Shown: the last layout that was.").arg(what));
  summary_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
}

}  // namespace mosaic::ui
