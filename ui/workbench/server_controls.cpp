#include "workbench/server_controls.h"

#include <QCheckBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace mosaic::ui {

ServerControls::ServerControls(QWidget* parent) : QWidget(parent) {
  host_ = new QLineEdit(QStringLiteral("127.0.0.1"));
  host_->setToolTip(tr("The address to listen on: 127.0.0.1 is this machine only; 0.0.0.0 every network it is on"));
  port_ = new QSpinBox;
  port_->setRange(0, 65535);
  port_->setValue(8000);
  port_->setSpecialValueText(tr("any free port"));
  key_ = new QLineEdit;
  key_->setEchoMode(QLineEdit::Password);
  key_->setPlaceholderText(tr("none (anyone who can reach the port)"));
  key_->setToolTip(tr("Clients then send 'Authorization: Bearer KEY', as OpenAI's clients do with their api_key"));
  admit_ = new QSpinBox;
  admit_->setRange(1, 4096);
  admit_->setValue(64);
  admit_->setSuffix(tr(" requests at once"));
  admit_->setToolTip(tr("Requests running and waiting; past it clients get 429 with Retry-After"));
  plain_ = new QCheckBox(tr("plain 'role: content' lines"));
  plain_->setToolTip(tr("Format chat requests as plain lines even where a model's tokenizer_config.json has a chat template"));
  start_ = new QPushButton(tr("Serve over HTTP"));
  stop_ = new QPushButton(tr("Stop server"));
  where_ = new QLabel;
  where_->setWordWrap(true);
  where_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  example_ = new QPlainTextEdit;
  example_->setReadOnly(true);
  example_->setLineWrapMode(QPlainTextEdit::NoWrap);
  example_->setMaximumHeight(90);
  example_->setFont(QFont(QStringLiteral("monospace"), 8));
  example_->setVisible(false);

  auto* address = new QHBoxLayout;
  address->addWidget(host_, 2);
  address->addWidget(port_, 1);
  auto* form = new QFormLayout;
  form->addRow(tr("Listen on"), address);
  form->addRow(tr("API key"), key_);
  form->addRow(tr("Admit"), admit_);
  form->addRow(tr("Chat"), plain_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addWidget(where_);
  layout->addWidget(example_);
  layout->addStretch();

  connect(start_, &QPushButton::clicked, this, [this] {
    starting_ = true;
    update();
    Q_EMIT startRequested();
  });
  connect(stop_, &QPushButton::clicked, this, &ServerControls::stopRequested);
  update();
}

HttpSettings ServerControls::settings() const {
  HttpSettings s;
  s.host = host_->text().trimmed();
  s.port = port_->value();
  s.api_key = key_->text();
  s.max_requests = admit_->value();
  s.plain_chat = plain_->isChecked();
  return s;
}

void ServerControls::setAvailable(bool available) {
  available_ = available;
  update();
}

void ServerControls::failed() {
  starting_ = false;
  update();
}

QString ServerControls::example() const {
  if (url_.isEmpty()) return {};
  const QString auth = key_->text().isEmpty() ? QString() : QStringLiteral(" -H 'Authorization: Bearer …'");
  return QStringLiteral("curl %1/completions \\\n  -H 'Content-Type: application/json'%2 \\\n  -d '{\"model\": \"%3\", \"prompt\": \"Hello\", \"max_tokens\": 16}'")
      .arg(url_, auth, first_model_);
}

void ServerControls::started(const QString& url, qint64 runId, const QStringList& models) {
  serving_ = true;
  starting_ = false;
  url_ = url;
  run_ = runId;
  setModels(models);
  example_->setVisible(true);
  update();
}

void ServerControls::setModels(const QStringList& models) {
  models_ = models;
  first_model_ = models.value(0);
  where_->setText(tr("Serving %n model(s) at <b>%1</b> (OpenAI API: /models, /completions, /chat/completions; "
                     "/metrics and /health beside /v1)%2.<br>Models: %3", nullptr, static_cast<int>(models.size()))
                      .arg(url_.toHtmlEscaped())
                      .arg(run_ > 0 ? tr("; recording run %1").arg(run_) : QString())
                      .arg(models.join(QStringLiteral(", ")).toHtmlEscaped()));
  example_->setPlainText(example());
}

void ServerControls::stopped() {
  serving_ = false;
  starting_ = false;
  url_.clear();
  where_->clear();
  example_->clear();
  example_->setVisible(false);
  update();
}

void ServerControls::update() {
  start_->setEnabled(available_ && !serving_ && !starting_);
  stop_->setEnabled(serving_);
  for (QWidget* w : {static_cast<QWidget*>(host_), static_cast<QWidget*>(port_), static_cast<QWidget*>(key_), static_cast<QWidget*>(admit_),
                     static_cast<QWidget*>(plain_)})
    w->setEnabled(!serving_ && !starting_);
}

}  // namespace mosaic::ui
