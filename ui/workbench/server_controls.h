#pragma once
// The serving panel's HTTP tab: where the workbench's OpenAI-compatible server listens (address,
// port, API key, requests admitted at once), Start and Stop, and once it listens, its URL, the
// models it serves and a request to paste into a terminal.
#include <QWidget>

#include "workbench/engine_types.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace mosaic::ui {

class ServerControls : public QWidget {
  Q_OBJECT
 public:
  explicit ServerControls(QWidget* parent = nullptr);
  HttpSettings settings() const;  // without the database, which the panel adds
  void setAvailable(bool available);  // a family is open and no sweep runs
  bool isServing() const { return serving_; }
  QLineEdit* hostEdit() const { return host_; }
  QSpinBox* portBox() const { return port_; }
  QLineEdit* apiKeyEdit() const { return key_; }
  QCheckBox* plainChatBox() const { return plain_; }
  QPushButton* startButton() const { return start_; }
  QPushButton* stopButton() const { return stop_; }
  QString url() const { return url_; }
  QString example() const;

 public Q_SLOTS:
  void started(const QString& url, qint64 runId, const QStringList& models);
  void setModels(const QStringList& models);  // the family changed while serving
  QStringList models() const { return models_; }
  void stopped();
  void failed();  // the start was refused: Start is offered again

 Q_SIGNALS:
  void startRequested();
  void stopRequested();

 private:
  void update();
  QLineEdit* host_;
  QSpinBox* port_;
  QLineEdit* key_;
  QSpinBox* admit_;
  QCheckBox* plain_;
  QPushButton* start_;
  QPushButton* stop_;
  QLabel* where_;
  QPlainTextEdit* example_;
  QString url_, first_model_;
  QStringList models_;
  qint64 run_ = 0;
  bool serving_ = false, available_ = false, starting_ = false;
};

}  // namespace mosaic::ui
