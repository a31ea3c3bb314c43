#include "workbench/chat_pane.h"

#include <QRandomGenerator>
#include <QResizeEvent>
#include <QToolButton>

#include <limits>
#include <utility>

#include <algorithm>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPushButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QToolTip>
#include <QHelpEvent>
#include <QHeaderView>
#include <QTabWidget>
#include <QTableView>
#include <QTextEdit>

#include "workbench/expert_trace.h"
#include "workbench/flow_layout.h"
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

namespace {
constexpr int kMinCell = 4, kMaxCell = 14;
// Hits, misses whose expert came from RAM, and misses whose bytes were read from disk (host budget):
// the three outcomes of a routed expert, the slowest winning the cell.
QColor cellColor(int hits, int misses, int disk) {
  if (disk > 0) return QColor(0x8c564b);
  return misses == 0 ? (hits > 0 ? QColor(0x2ca02c) : QColor(0xeeeeee)) : (hits == 0 ? QColor(0xd62728) : QColor(0xff7f0e));
}
}  // namespace

int TokenStrip::cellWidth() const {
  return std::clamp(width() / std::max(1, static_cast<int>(tokens_.size())), kMinCell, kMaxCell);
}

int TokenStrip::firstShown() const {
  return std::max(0, static_cast<int>(tokens_.size()) - width() / cellWidth());
}

int TokenStrip::indexAt(const QPoint& pos) const {
  const int i = firstShown() + pos.x() / cellWidth();
  return pos.x() >= 0 && i < tokens_.size() ? i : -1;
}

QString TokenStrip::describe(int index) const {
  if (index < 0 || index >= tokens_.size()) return {};
  const TokenTrace& t = tokens_[index];
  QString text = tr("token %1: \"%2\" (id %3)").arg(index + 1).arg(t.text.toHtmlEscaped()).arg(t.token);
  if (t.swaps > 0) text += tr("\nnon-expert weights swapped before it");
  // The choices that produced it: those of the token before it (the prompt's last for the first).
  for (int l = 0; l < t.hits.size(); ++l) {
    QStringList experts;
    for (const ExpertRoute& r : t.routes) {
      if (r.position != t.position - 1 || r.layer != l) continue;
      QString e = tr("%1 %2").arg(r.expert).arg(r.outcome == ExpertRoute::Outcome::Hit ? tr("hit") : r.outcome == ExpertRoute::Outcome::Miss ? tr("miss") : tr("dropped"));
      if (!r.served_by.isEmpty()) e += tr(" (%1)").arg(r.served_by);
      experts << e;
    }
    text += experts.isEmpty() ? tr("\nlayer %1: %2 hit, %3 missed").arg(l).arg(t.hits.value(l)).arg(t.misses.value(l))
                              : tr("\nlayer %1: experts %2").arg(l).arg(experts.join(QStringLiteral(", ")));
    if (t.disk.value(l) > 0) text += tr(" — %n expert(s) read from disk", "", t.disk.value(l));
  }
  return text;
}

bool TokenStrip::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const QString text = describe(indexAt(help->pos()));
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(help->globalPos(), text, this);
    return true;
  }
  return QWidget::event(e);
}

void TokenStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (tokens_.isEmpty()) return;
  const int layers = static_cast<int>(tokens_.front().hits.size());
  const int w = cellWidth();
  const int h = std::max(2, (height() - 8) / std::max(layers, 1));
  for (int i = firstShown(); i < tokens_.size(); ++i) {
    const TokenTrace& t = tokens_[i];
    const int x = (i - firstShown()) * w;
    if (t.swaps > 0) p.fillRect(QRect(x, 0, w - 1, 6), QColor(0x9467bd));  // a swap before this token
    for (int l = 0; l < layers; ++l) p.fillRect(QRect(x, 8 + l * h, w - 1, h - 1), cellColor(t.hits.value(l), t.misses.value(l), t.disk.value(l)));
  }
}

ChatPane::ChatPane(QWidget* parent) : QWidget(parent) {
  target_ = new QComboBox;
  target_->setMinimumContentsLength(12);
  prompt_ = new QLineEdit;
  prompt_->setPlaceholderText(tr("Type a message and press Enter; the conversation so far is its context"));
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
  seed_ = new QSpinBox;
  seed_->setRange(-1, std::numeric_limits<int>::max());
  seed_->setValue(-1);
  seed_->setSpecialValueText(tr("seed: new each time"));
  seed_->setPrefix(tr("seed "));
  seed_->setToolTip(tr("At T > 0 every Send draws with a new seed (shown under the answer); set one to draw the same answer again"));
  regenerate_ = new QPushButton(tr("Regenerate"));
  regenerate_->setToolTip(tr("The last answer drawn again, with a new seed unless one is set"));
  regenerate_->setEnabled(false);
  new_chat_ = new QPushButton(tr("New chat"));
  new_chat_->setToolTip(tr("Forget the conversation: the next prompt starts a new one"));
  transcript_ = new QTextEdit;
  transcript_->setReadOnly(true);
  trace_ = new ExpertTraceModel(this);
  trace_view_ = new QTableView;
  trace_view_->setModel(trace_);
  trace_view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  trace_view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  trace_view_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  trace_view_->setToolTip(tr("Each token's router choices per layer: the expert, and ←variant where another variant's copy served it. "
                             "Green: all hits; red: all misses; orange: both. Hover a cell for details."));
  tabs_ = new QTabWidget;
  tabs_->addTab(transcript_, tr("Answer"));
  tabs_->addTab(trace_view_, tr("Expert trace"));
  strip_ = new TokenStrip;
  strip_->setMinimumHeight(50);
  // The colours' meaning on screen, not only in a tooltip; hovering a token tells its layers.
  auto* key = new QLabel(tr("Per token (→) and MoE layer (↓): <span style='color:#2ca02c'>■</span>&nbsp;all&nbsp;hits "
                            "<span style='color:#ff7f0e'>■</span>&nbsp;hits&nbsp;and&nbsp;misses "
                            "<span style='color:#d62728'>■</span>&nbsp;all&nbsp;misses "
                            "<span style='color:#8c564b'>■</span>&nbsp;misses&nbsp;read&nbsp;from&nbsp;disk "
                            "<span style='color:#9467bd'>▬</span>&nbsp;non-expert&nbsp;swap&nbsp;before&nbsp;it · hover a token for its layers"));
  key->setTextFormat(Qt::RichText);
  key->setWordWrap(true);
  key_ = key;
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  strip_toggle_ = new QToolButton;
  strip_toggle_->setText(tr("Hits per token"));
  strip_toggle_->setCheckable(true);
  strip_toggle_->setChecked(true);
  strip_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  strip_toggle_->setArrowType(Qt::DownArrow);
  strip_toggle_->setAutoRaise(true);
  strip_toggle_->setToolTip(tr("Show or hide the strip of hits and misses per token (hidden by itself when the pane is short; shown "
                               "there by hand, without its legend: green all hits, orange hits and misses, red all misses, brown "
                               "misses read from disk, a purple bar a non-expert swap before the token)"));

  auto* top = new FlowLayout;  // wraps where the pane is narrow
  top->addWidget(FlowLayout::group({new QLabel(tr("Variant")), target_}));
  top->addWidget(max_new_);
  top->addWidget(temperature_);
  top->addWidget(top_p_);
  top->addWidget(seed_);
  auto* input = new QHBoxLayout;
  input->addWidget(prompt_, 1);
  input->addWidget(send_);
  input->addWidget(regenerate_);
  input->addWidget(stop_);
  input->addWidget(new_chat_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(tabs_, 1);
  layout->addWidget(strip_toggle_);
  layout->addWidget(strip_);
  layout->addWidget(key_);
  layout->addWidget(summary_);
  layout->addLayout(input);

  connect(send_, &QPushButton::clicked, this, &ChatPane::send);
  connect(regenerate_, &QPushButton::clicked, this, &ChatPane::regenerate);
  connect(new_chat_, &QPushButton::clicked, this, &ChatPane::newChat);
  connect(strip_toggle_, &QToolButton::clicked, this, [this](bool on) {
    strip_chosen_ = true;
    showStrip(on);
  });
  connect(prompt_, &QLineEdit::returnPressed, this, &ChatPane::send);
  connect(stop_, &QPushButton::clicked, this, &ChatPane::stopRequested);
  setBusy(false);
  send_->setEnabled(false);
}

void ChatPane::showStrip(bool on) {
  strip_->setVisible(on);
  // The legend (three lines on a narrow pane) only where there is room: opened by hand on a short
  // pane, strip and legend left the answer one line (1366×768); the toggle's tooltip says the colours.
  key_->setVisible(on && height() >= kStripRoom);
  strip_toggle_->setChecked(on);
  strip_toggle_->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
}

// The conversation is the main area: on a short pane the strip and its legend give it their room.
void ChatPane::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  showStrip(strip_chosen_ ? strip_toggle_->isChecked() : height() >= kStripRoom);
}

void ChatPane::setVariants(const FamilyInfo& family) {
  const QString current = target_->currentText();
  target_->clear();
  for (const VariantInfo& v : family.variants) target_->addItem(v.name);
  if (target_->findText(current) >= 0) target_->setCurrentText(current);
  if (target_->findText(preset_target_) >= 0) target_->setCurrentText(preset_target_);
  setBusy(stop_->isEnabled());  // a family changed while an answer streams: it streams on
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
  turns_.push_back({QStringLiteral("user"), prompt_->text()});
  prompt_->clear();
  submit(target_->currentText(), false);
}

void ChatPane::regenerate() {
  if (!send_->isEnabled() || turns_.isEmpty() || turns_.back().role != QStringLiteral("assistant")) return;
  replaced_ = turns_.takeLast();  // drawn again from the same context; back if the new draw fails
  submit(last_target_, true);
}

void ChatPane::newChat() {
  if (answering_) return;
  turns_.clear();
  replaced_.reset();
  answer_.clear();
  transcript_->clear();
  strip_->clear();
  trace_->start(QString());
  summary_->clear();
  setBusy(false);
}

void ChatPane::submit(const QString& target, bool again) {
  answer_.clear();
  strip_->clear();
  trace_->start(target);
  summary_->clear();
  last_target_ = target;
  // At T > 0 a new draw each time, unless a seed is set; greedy decoding draws nothing.
  last_seed_ = seed_->value() >= 0 ? seed_->value() : static_cast<qint64>(QRandomGenerator::global()->bounded(1u << 31));
  transcript_->moveCursor(QTextCursor::End);
  const QString said = again ? tr("<i>(drawn again)</i>") : turns_.back().content.toHtmlEscaped();
  transcript_->insertHtml(QStringLiteral("<p><b>you ›</b> %1</p><p><b>%2 ›</b> ").arg(said, target.toHtmlEscaped()));
  answering_ = true;
  setBusy(true);
  Q_EMIT chatRequested(target, turns_, max_new_->value(), temperature_->value(), top_p_->value(), static_cast<quint64>(last_seed_));
}

void ChatPane::appendToken(const TokenTrace& token) {
  answer_ += token.text;
  transcript_->moveCursor(QTextCursor::End);
  transcript_->insertPlainText(token.text);
  transcript_->verticalScrollBar()->setValue(transcript_->verticalScrollBar()->maximum());
  strip_->append(token);
  trace_->add(token);
}

void ChatPane::finish(const QString& rest, const QString& summary) {
  answer_ += rest;
  transcript_->moveCursor(QTextCursor::End);
  transcript_->insertPlainText(rest + QStringLiteral("\n\n"));
  answering_ = false;
  turns_.push_back({QStringLiteral("assistant"), answer_});
  replaced_.reset();
  summary_->setStyleSheet(QString());
  summary_->setText(temperature_->value() > 0 ? summary + tr(" · seed %1").arg(last_seed_) : summary);
  setBusy(false);
}

void ChatPane::showError(const QString& what, const QString& message) {
  summary_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  summary_->setText(what + QStringLiteral(": ") + message);
  if (answering_) {  // the prompt's header gets its ending: no header is left without an answer
    transcript_->moveCursor(QTextCursor::End);
    transcript_->insertHtml(QStringLiteral("</p><p><i style='color:#b00020'>%1</i></p><p>").arg(tr("(no answer: %1)").arg(message).toHtmlEscaped()));
    transcript_->insertPlainText(QStringLiteral("\n"));
    answering_ = false;
    // The conversation stays as it was: a message that got no answer is not part of it.
    if (replaced_) turns_.push_back(*std::exchange(replaced_, std::nullopt));
    else if (!turns_.isEmpty() && turns_.back().role == QStringLiteral("user")) prompt_->setText(turns_.takeLast().content);
  }
  setBusy(false);
}

void ChatPane::setBusy(bool busy) {
  send_->setEnabled(!busy && target_->count() > 0);
  regenerate_->setEnabled(!busy && target_->count() > 0 && !turns_.isEmpty() && turns_.back().role == QStringLiteral("assistant"));
  new_chat_->setEnabled(!busy && !turns_.isEmpty());
  stop_->setEnabled(busy);
  prompt_->setEnabled(!busy);
}

}  // namespace mosaic::ui
