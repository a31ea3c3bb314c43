#pragma once
// The status bar's permanent part: the open family, where it is served, the layout in force and what
// the engine is running (a sweep, the HTTP server), so the window says what it is doing once the
// transient messages beside it have gone.
#include <QLabel>

namespace mosaic::ui {

class EngineStatus : public QLabel {
  Q_OBJECT
 public:
  explicit EngineStatus(QWidget* parent = nullptr);

  void setFamily(int variants);
  void setDevice(const QString& device);
  void setLayout(qint64 resident, qint64 positions);
  void setSweepRunning(bool running);
  void setServerUrl(const QString& url);  // "" once it has stopped

 private:
  void refresh();
  int variants_ = 0;
  QString device_;
  qint64 resident_ = -1, positions_ = 0;  // -1: no layout planned yet
  bool sweep_ = false;
  QString server_;
};

}  // namespace mosaic::ui
