#include "workbench/compare_pane.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QTextEdit>
#include <QVBoxLayout>

namespace mosaic::ui {

namespace {
constexpr int kMaxNewTokens = 60;
constexpr double kTemperature = 0.0;  // greedy: the sides differ only where their weights do
}  // namespace

ComparePane::ComparePane(QWidget* parent) : QWidget(parent) {
  left_ = new QComboBox;
  right_ = new QComboBox;
  left_own_ = new QCheckBox(tr("its own weights alone"));
  right_own_ = new QCheckBox(tr("its own weights alone"));
  left_own_->setChecked(true);
  for (QCheckBox* c : {left_own_, right_own_})
    c->setToolTip(tr("Checked: the variant's checkpoint through the reference forward pass, every expert its own. "
                     "Unchecked: the variant as the layout on screen serves it (consolidated experts, misses loaded)."));
  prompt_ = new QLineEdit;
  prompt_->setPlaceholderText(tr("One prompt for both sides; Enter compares them (greedy decoding)"));
  send_ = new QPushButton(tr("Compare"));
  stop_ = new QPushButton(tr("Stop"));
  stop_->setEnabled(false);
  status_ = new QLabel(tr("Choose two variants — or one variant twice, its own weights against as served — and a prompt."));
  status_->setWordWrap(true);
  auto* grid = new QGridLayout;
  for (int side : {0, 1}) {
    column_[side] = new QTextEdit;
    column_[side]->setReadOnly(true);
    summary_[side] = new QLabel;
    summary_[side]->setWordWrap(true);
    auto* head = new QHBoxLayout;
    head->addWidget(side == 0 ? left_ : right_, 1);
    head->addWidget(side == 0 ? left_own_ : right_own_);
    grid->addLayout(head, 0, side);
    grid->addWidget(column_[side], 1, side);
    grid->addWidget(summary_[side], 2, side);
  }
  grid->setRowStretch(1, 1);
  auto* input = new QHBoxLayout;
  input->addWidget(prompt_, 1);
  input->addWidget(send_);
  input->addWidget(stop_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(grid, 1);
  layout->addWidget(status_);
  layout->addLayout(input);
  connect(send_, &QPushButton::clicked, this, &ComparePane::send);
  connect(prompt_, &QLineEdit::returnPressed, this, &ComparePane::send);
  connect(stop_, &QPushButton::clicked, this, &ComparePane::stopRequested);
  send_->setEnabled(false);
}

void ComparePane::setVariants(const FamilyInfo& family) {
  for (QComboBox* box : {left_, right_}) {
    const QString current = box->currentText();
    box->clear();
    for (const VariantInfo& v : family.variants) box->addItem(v.name);
    if (box->findText(current) >= 0) box->setCurrentText(current);
  }
  send_->setEnabled(left_->count() > 0);
}

QString ComparePane::text(int side) const { return pieces_[side].join(QString()); }
QString ComparePane::statusText() const { return status_->text(); }
QString ComparePane::summaryText(int side) const { return summary_[side]->text(); }

int ComparePane::divergence() const {
  const int n = static_cast<int>(std::min(ids_[0].size(), ids_[1].size()));
  for (int i = 0; i < n; ++i)
    if (ids_[0][i] != ids_[1][i]) return i;
  return -1;
}

void ComparePane::send() {
  if (!send_->isEnabled() || prompt_->text().isEmpty()) return;
  for (int side : {0, 1}) {
    ids_[side].clear();
    pieces_[side].clear();
    summary_[side]->setStyleSheet(QString());
    summary_[side]->clear();
    render(side);
  }
  running_ = 2;
  send_->setEnabled(false);
  stop_->setEnabled(true);
  status_->setText(tr("Streaming both…"));
  Q_EMIT compareRequested(left_->currentText(), left_own_->isChecked(), right_->currentText(), right_own_->isChecked(), prompt_->text(),
                          kMaxNewTokens, kTemperature, 1.0);
}

void ComparePane::appendToken(int side, qint64 token, const QString& text) {
  ids_[side].push_back(token);
  pieces_[side] << text;
  render(side);
  render(1 - side);  // the mark may appear on the other side too
  updateStatus();
}

// Tokens up to the first divergence plain, that token marked, the rest dimmed.
void ComparePane::render(int side) {
  const int at = divergence();
  QString html = QStringLiteral("<p style='white-space:pre-wrap'><i style='color:#777'>%1</i> ").arg(prompt_->text().toHtmlEscaped());
  for (int i = 0; i < pieces_[side].size(); ++i) {
    const QString piece = pieces_[side][i].toHtmlEscaped();
    if (at < 0 || i < at) html += piece;
    else if (i == at) html += QStringLiteral("<span style='background:#f6c9c9;color:#8b0000;font-weight:bold'>%1</span>").arg(piece);
    else html += QStringLiteral("<span style='color:#666'>%1</span>").arg(piece);  // dimmed, still readable (#999 on white was 2.8:1)
  }
  column_[side]->setHtml(html + QStringLiteral("</p>"));
  column_[side]->verticalScrollBar()->setValue(column_[side]->verticalScrollBar()->maximum());
}

void ComparePane::updateStatus() {
  const int at = divergence();
  if (at >= 0)
    status_->setText(tr("They diverge at generated token %1: “%2” against “%3” (marked).")
                         .arg(at + 1)
                         .arg(pieces_[0].value(at), pieces_[1].value(at)));
  else if (running_ == 0)
    status_->setText(ids_[0] == ids_[1] ? tr("Identical: %1 tokens each.").arg(ids_[0].size())
                                        : tr("They agree on their first %1 tokens; one stopped earlier.").arg(std::min(ids_[0].size(), ids_[1].size())));
  else
    status_->setText(tr("Identical so far (%1 tokens)…").arg(std::min(ids_[0].size(), ids_[1].size())));
}

void ComparePane::finish(int side, const QString& rest, const QString& summary) {
  if (!rest.isEmpty() && !pieces_[side].isEmpty()) {  // a character the last token cut short: its piece's
    pieces_[side].last() += rest;
    render(side);
  }
  summary_[side]->setText(summary);
  if (--running_ <= 0) {
    running_ = 0;
    send_->setEnabled(true);
    stop_->setEnabled(false);
  }
  updateStatus();
}

void ComparePane::showError(int side, const QString& message) {
  summary_[side]->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  summary_[side]->setText(message);
  finish(side, {}, message);
  summary_[side]->setText(message);
}

}  // namespace mosaic::ui
