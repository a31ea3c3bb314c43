#include "workbench/usage_panel.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSet>
#include <QSpinBox>
#include <QVBoxLayout>

#include "report/plot_export.h"
#include "workbench/chart.h"
#include "workbench/layout_grid.h"

namespace mosaic::ui {

UsagePanel::UsagePanel(QWidget* parent) : QWidget(parent) {
  text_ = new QPlainTextEdit;
  text_->setPlaceholderText(tr("Paste a text the variants will serve, e.g. a page of their domains"));
  text_->setMaximumHeight(90);
  layer_ = new QSpinBox;
  layer_->setPrefix(tr("layer "));
  layer_->setRange(0, 0);
  count_ = new QPushButton(tr("Count expert choices"));
  status_ = new QLabel(tr("Routes the text through every variant and counts, per layer, each expert's share of the router's choices."));
  status_->setWordWrap(true);
  chart_ = new Chart(tr("Expert usage"), tr("expert"), tr("share of choices (%)"));
  chart_->setMinimumHeight(220);
  chart_->setPlaceholder(tr("No data yet — paste a text above and press Count expert choices"));
  connect(chart_, &Chart::exported, status_, &QLabel::setText);

  auto* row = new QHBoxLayout;
  row->addWidget(count_);
  row->addWidget(layer_);
  row->addStretch();
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(text_);
  layout->addLayout(row);
  layout->addWidget(status_);
  layout->addWidget(chart_, 1);
  connect(count_, &QPushButton::clicked, this, &UsagePanel::count);
  connect(layer_, &QSpinBox::valueChanged, this, &UsagePanel::draw);
}

QString UsagePanel::statusText() const { return status_->text(); }

void UsagePanel::count() {
  count_->setEnabled(false);
  status_->setStyleSheet(QString());
  status_->setText(tr("Routing the text through every variant…"));
  Q_EMIT usageRequested(text_->toPlainText());
}

void UsagePanel::showUsage(const ExpertUsage& usage) {
  usage_ = usage;
  count_->setEnabled(true);
  QStringList tokens;
  for (int v = 0; v < usage.variants.size(); ++v) tokens << QString::number(usage.tokens.value(v));
  tokens.removeDuplicates();
  status_->setText(tr("%1 tokens of text per variant, %2 variants: each bar is the share of a layer's top-k choices that went to that expert.")
                       .arg(tokens.join(QStringLiteral("/")))
                       .arg(usage.variants.size()) +
                   (usage.masked ? tr(" <b>As served, masked:</b> the layout gates over its resident experts only, so these are the choices "
                                      "among them, not what the routers alone would choose.")
                                 : QString()));
  chart_->setTitle(usage.masked ? tr("Expert usage as served (masked to the resident experts)") : tr("Expert usage"));
  layer_->setRange(0, std::max(0, usage.layers - 1));
  // Start on the first layer that routes (dense layers have no experts to count).
  for (int l = 0; l < usage.layers; ++l) {
    qint64 any = 0;
    for (int e = 0; e < usage.experts; ++e) any += usage.count(0, l, e);
    if (any > 0) {
      if (layer_->value() == l) draw();
      layer_->setValue(l);
      break;
    }
  }
}

void UsagePanel::clear(const QString& why) {
  if (usage_.variants.isEmpty()) return;  // nothing counted to forget
  usage_ = ExpertUsage{};
  chart_->clearPlottables();
  chart_->layOutLegend();
  chart_->replot(QCustomPlot::rpQueuedReplot);
  status_->setStyleSheet(QString());
  status_->setText(why);
}

void UsagePanel::showError(const QString& message) {
  count_->setEnabled(true);
  status_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  status_->setText(message);
}

void UsagePanel::draw() {
  QSet<QString> hidden;  // variants toggled off stay off from layer to layer
  for (int i = 0; i < chart_->plottableCount(); ++i)
    if (!chart_->plottable(i)->visible()) hidden.insert(chart_->plottable(i)->name());
  chart_->clearPlottables();
  const int l = layer_->value();
  const int variants = static_cast<int>(usage_.variants.size());
  if (variants == 0) return;
  auto* group = new QCPBarsGroup(chart_);
  group->setSpacing(0);
  for (int v = 0; v < variants; ++v) {
    qint64 total = 0;
    for (int e = 0; e < usage_.experts; ++e) total += usage_.count(v, l, e);
    auto* bars = new QCPBars(chart_->xAxis, chart_->yAxis);
    bars->setName(usage_.variants[v]);
    bars->setBrush(variantColor(v));
    bars->setPen(Qt::NoPen);
    bars->setWidth(0.85 / variants);
    bars->setBarsGroup(group);
    for (int e = 0; e < usage_.experts; ++e)
      bars->addData(e, total > 0 ? 100.0 * static_cast<double>(usage_.count(v, l, e)) / static_cast<double>(total) : 0.0);
    if (hidden.contains(bars->name())) chart_->setSeriesVisible(chart_->plottableCount() - 1, false);
  }
  auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
  ticker->setTickStep(1.0);
  chart_->xAxis->setTicker(ticker);
  chart_->xAxis->setRange(-0.6, usage_.experts - 0.4);
  chart_->yAxis->rescale();
  chart_->yAxis->setRange(0, std::max(1.0, chart_->yAxis->range().upper * 1.1));
  chart_->layOutLegend();
  chart_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace mosaic::ui
