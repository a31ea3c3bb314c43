#include "workbench/chat_pane.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPushButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QTextEdit>
#include <QVBoxLayout>

namespace mosaic::ui {

void TokenStrip::clear() {
  tokens_.clear();
  update();
}

void TokenStrip::append(const TokenTrace& t) {
  tokens_.push_back(t);
  update();
}

void TokenStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (tokens_.isEmpty()) return;
  const int layers = static_cast<int>(tokens_.front().hits.size());
  const int w = std::max(2, std::min(14, width() / static_cast<int>(tokens_.size())));
  const int h = std::max(2, (height() - 8) / std::max(layers, 1));
  for (int i = 0; i < tokens_.size(); ++i) {
    const TokenTrace& t = tokens_[i];
    const int x = i * w;
    if (x > width()) break;
    if (t.swaps > 0) p.fillRect(QRect(x, 0, w - 1, 6), QColor(0x9467bd));  // a swap before this token
    for (int l = 0; l < layers; ++l) {
      const int hits = t.hits.value(l), misses = t.misses.value(l);
      const QColor c = misses == 0 ? (hits > 0 ? QColor(0x2ca02c) : QColor(0xeeeeee)) : (hits == 0 ? QColor(0xd62728) : QColor(0xff7f0e));
      p.fillRect(QRect(x, 8 + l * h, w - 1, h - 1), c);
    }
  }
}

ChatPane::ChatPane(QWidget* parent) : QWidget(parent) {
  target_ = new QComboBox;
  target_->setMinimumContentsLength(12);
  prompt_ = new QLineEdit;
  prompt_->setPlaceholderText(tr("Type a prompt and press Enter"));
  send_ = new QPushButton(tr("Send"));
  stop_ = new QPushButton(tr("Stop"));
  stop_->setEnabled(false);
  max_new_ = new QSpinBox;
  max_new_->setRange(1, 4096);
  max_new_->setValue(60);
  max_new_->setPrefix(tr("max "));
  temperature_ = new QDoubleSpinBox;
  temperature_->setRange(0, 2);
  temperature_->setSingleStep(0.1);
  temperature_->setValue(0.7);
  temperature_->setPrefix(tr("T "));
  top_p_ = new QDoubleSpinBox;
  top_p_->setRange(0.05, 1);
  top_p_->setSingleStep(0.05);
  top_p_->setValue(0.95);
  top_p_->setPrefix(tr("top-p "));
  transcript_ = new QTextEdit;
  transcript_->setReadOnly(true);
  strip_ = new TokenStrip;
  strip_->setMinimumHeight(50);
  strip_->setToolTip(tr("Per token (left to right) and MoE layer (top to bottom): green all hits, red all misses, "
                        "orange both; purple above a token: the non-expert weights were swapped before it"));
  summary_ = new QLabel;
  summary_->setWordWrap(true);

  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Variant")));
  top->addWidget(target_);
  top->addWidget(max_new_);
  top->addWidget(temperature_);
  top->addWidget(top_p_);
  top->addStretch();
  auto* input = new QHBoxLayout;
  input->addWidget(prompt_, 1);
  input->addWidget(send_);
  input->addWidget(stop_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(transcript_, 1);
  layout->addWidget(strip_);
  layout->addWidget(summary_);
  layout->addLayout(input);

  connect(send_, &QPushButton::clicked, this, &ChatPane::send);
  connect(prompt_, &QLineEdit::returnPressed, this, &ChatPane::send);
  connect(stop_, &QPushButton::clicked, this, &ChatPane::stopRequested);
  setBusy(false);
  send_->setEnabled(false);
}

void ChatPane::setVariants(const FamilyInfo& family) {
  const QString current = target_->currentText();
  target_->clear();
  for (const VariantInfo& v : family.variants) target_->addItem(v.name);
  if (target_->findText(current) >= 0) target_->setCurrentText(current);
  if (target_->findText(preset_target_) >= 0) target_->setCurrentText(preset_target_);
  send_->setEnabled(target_->count() > 0);
}

void ChatPane::preset(const QString& target, const QString& prompt, int maxNew, double temperature, double topP) {
  preset_target_ = target;
  if (target_->findText(target) >= 0) target_->setCurrentText(target);
  if (!prompt.isEmpty()) prompt_->setText(prompt);
  if (maxNew >= 0) max_new_->setValue(maxNew);
  if (temperature >= 0) temperature_->setValue(temperature);
  if (topP >= 0) top_p_->setValue(topP);
}

QString ChatPane::answer() const { return answer_; }
QString ChatPane::summaryText() const { return summary_->text(); }

void ChatPane::send() {
  if (!send_->isEnabled() || prompt_->text().isEmpty()) return;
  answer_.clear();
  strip_->clear();
  summary_->clear();
  transcript_->moveCursor(QTextCursor::End);
  transcript_->insertHtml(QStringLiteral("<p><b>%1 ›</b> %2</p><p>").arg(target_->currentText().toHtmlEscaped(), prompt_->text().toHtmlEscaped()));
  transcript_->insertPlainText(prompt_->text());
  setBusy(true);
  Q_EMIT chatRequested(target_->currentText(), prompt_->text(), max_new_->value(), temperature_->value(), top_p_->value());
}

void ChatPane::appendToken(const TokenTrace& token) {
  answer_ += token.text;
  transcript_->moveCursor(QTextCursor::End);
  transcript_->insertPlainText(token.text);
  transcript_->verticalScrollBar()->setValue(transcript_->verticalScrollBar()->maximum());
  strip_->append(token);
}

void ChatPane::finish(const QString& summary) {
  transcript_->moveCursor(QTextCursor::End);
  transcript_->insertPlainText(QStringLiteral("\n\n"));
  summary_->setStyleSheet(QString());
  summary_->setText(summary);
  setBusy(false);
}

void ChatPane::showError(const QString& what, const QString& message) {
  summary_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  summary_->setText(what + QStringLiteral(": ") + message);
  setBusy(false);
}

void ChatPane::setBusy(bool busy) {
  send_->setEnabled(!busy && target_->count() > 0);
  stop_->setEnabled(busy);
  prompt_->setEnabled(!busy);
}

}  // namespace mosaic::ui
