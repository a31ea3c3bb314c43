#include "workbench/engine_status.h"

namespace mosaic::ui {

EngineStatus::EngineStatus(QWidget* parent) : QLabel(parent) {
  setObjectName(QStringLiteral("engineStatus"));
  setTextInteractionFlags(Qt::TextSelectableByMouse);  // the server's address, to copy
  refresh();
}

void EngineStatus::setFamily(int variants) {
  variants_ = variants;
  resident_ = -1;  // the new family's layout is planned next
  refresh();
}

void EngineStatus::setDevice(const QString& device) {
  device_ = device;
  refresh();
}

void EngineStatus::setLayout(qint64 resident, qint64 positions) {
  resident_ = resident;
  positions_ = positions;
  refresh();
}

void EngineStatus::setSweepRunning(bool running) {
  sweep_ = running;
  refresh();
}

void EngineStatus::setServerUrl(const QString& url) {
  server_ = url;
  refresh();
}

void EngineStatus::refresh() {
  QStringList parts;
  parts << (variants_ == 0 ? tr("No family open") : variants_ == 1 ? tr("1 variant") : tr("%1 variants").arg(variants_));
  if (!device_.isEmpty()) parts << tr("on %1").arg(device_);
  if (variants_ > 0 && resident_ >= 0) parts << tr("%1 of %2 expert positions resident").arg(resident_).arg(positions_);
  if (sweep_) parts << tr("sweep running");
  if (!server_.isEmpty()) parts << tr("serving at %1").arg(server_);
  setText(parts.join(QStringLiteral(" · ")));
}

}  // namespace mosaic::ui
