#pragma once
// Chat with any variant: choose the target, type, watch the answer stream in (the conversation so
// far is its context, until New chat); under it a strip
// shows, per token, each MoE layer's hits (green) and misses (red) and a swap marker where the
// non-expert weights were swapped (hover: the experts chosen). Beside the answer, its expert trace
// (token × layer). Sampling controls and a stop button.
#include <QVector>
#include <QWidget>

#include <optional>

#include "workbench/engine_types.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableView;
class QToolButton;
class QTextEdit;

namespace mosaic::ui {

class ExpertTraceModel;

class TokenStrip : public QWidget {
  Q_OBJECT
 public:
  using QWidget::QWidget;
  void clear();
  void append(const TokenTrace& t);
  const QVector<TokenTrace>& tokens() const { return tokens_; }
  QSize sizeHint() const override { return {400, 60}; }
  // Tokens get cells of at least kMinCell px; when they outgrow the strip it shows the latest ones.
  int firstShown() const;
  int indexAt(const QPoint& pos) const;  // −1 off the cells
  // What hovering token `index` shows: its text and, per MoE layer, hits and misses.
  QString describe(int index) const;

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;

 private:
  int cellWidth() const;
  QVector<TokenTrace> tokens_;
};

class ChatPane : public QWidget {
  Q_OBJECT
 public:
  explicit ChatPane(QWidget* parent = nullptr);
  QString answer() const;
  QString summaryText() const;
  TokenStrip* strip() const { return strip_; }
  ExpertTraceModel* trace() const { return trace_; }
  QTabWidget* tabs() const { return tabs_; }
  QLineEdit* promptEdit() const { return prompt_; }
  QComboBox* targetBox() const { return target_; }
  QSpinBox* maxNewBox() const { return max_new_; }
  QDoubleSpinBox* temperatureBox() const { return temperature_; }
  QDoubleSpinBox* topPBox() const { return top_p_; }
  QSpinBox* seedBox() const { return seed_; }  // −1 ("new each time"): a fresh seed per Send at T > 0
  QPushButton* sendButton() const { return send_; }
  QPushButton* regenerateButton() const { return regenerate_; }
  QPushButton* newChatButton() const { return new_chat_; }
  const QVector<ChatTurn>& conversation() const { return turns_; }
  // The token strip and its legend: shown when the pane has room (kStripRoom px) or when asked.
  QToolButton* stripToggle() const { return strip_toggle_; }
  QLabel* stripKey() const { return key_; }  // the strip's legend: shown with it where the pane has room
  static constexpr int kStripRoom = 420;
  qint64 lastSeed() const { return last_seed_; }  // the seed the last Send drew with
  // Chosen once the family's variants arrive (a session reopening); negative numbers keep the current value.
  void preset(const QString& target, const QString& prompt, int maxNew = -1, double temperature = -1, double topP = -1);

 public Q_SLOTS:
  void setVariants(const mosaic::ui::FamilyInfo& family);
  void appendToken(const mosaic::ui::TokenTrace& token);
  void finish(const QString& rest, const QString& summary);
  void showError(const QString& what, const QString& message);
  void send();        // the prompt as the next user turn of the conversation
  void regenerate();  // the last answer drawn again from the same context, with a new seed unless one is set
  void newChat();     // forgets the conversation

 Q_SIGNALS:
  void chatRequested(const QString& target, const QVector<mosaic::ui::ChatTurn>& conversation, int maxNewTokens, double temperature,
                     double topP, quint64 seed);
  void stopRequested();

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void setBusy(bool busy);
  void showStrip(bool on);
  void submit(const QString& target, bool again);  // the conversation's next answer (`again`: the last one redrawn)
  QComboBox* target_;
  QLineEdit* prompt_;
  QPushButton* send_;
  QPushButton* stop_;
  QSpinBox* max_new_;
  QDoubleSpinBox* temperature_;
  QDoubleSpinBox* top_p_;
  QSpinBox* seed_;
  QPushButton* regenerate_;
  QPushButton* new_chat_;
  QToolButton* strip_toggle_;
  bool strip_chosen_ = false;  // the user toggled it: room no longer decides
  QTextEdit* transcript_;
  ExpertTraceModel* trace_;
  QTableView* trace_view_;
  QTabWidget* tabs_;
  TokenStrip* strip_;
  QLabel* summary_;
  QLabel* key_;  // what the strip's colours mean
  QString answer_;
  QString preset_target_;
  QString last_target_;
  QVector<ChatTurn> turns_;           // the conversation: user and assistant turns, in order
  std::optional<ChatTurn> replaced_;  // the answer Regenerate is drawing again
  qint64 last_seed_ = 0;
  bool answering_ = false;  // a header is in the transcript whose answer has not ended
};

}  // namespace mosaic::ui
