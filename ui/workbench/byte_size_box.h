#pragma once
// A byte-size field that takes what people type — "2GiB", "1.5 GB", "300 MiB", or a bare number
// of MiB — and shows IEC units, always printed (the unit of the value is MiB). With a special value
// text (setMinimum(0), setSpecialValueText("all")) that text is typed and shown for the minimum.
#include <QDoubleSpinBox>

namespace mosaic::ui {

class ByteSizeBox : public QDoubleSpinBox {
  Q_OBJECT
 public:
  explicit ByteSizeBox(QWidget* parent = nullptr);
  qint64 bytes() const;
  void setBytes(qint64 bytes);

 Q_SIGNALS:
  // Text that is no size ("abc") was entered and the box went back to its value: why, for a note
  // beside it (a tooltip says it at the box too). Queued: emitted after the box has gone back.
  void refused(const QString& why);

 protected:
  void fixup(QString& text) const override;
  QValidator::State validate(QString& text, int& pos) const override;
  double valueFromText(const QString& text) const override;
  QString textFromValue(double mib) const override;
};

}  // namespace mosaic::ui
