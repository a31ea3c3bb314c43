#include "workbench/byte_size_box.h"

#include <QToolTip>

#include <cmath>

#include "common/byte_size.h"

namespace mosaic::ui {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;

// Bytes of what was typed: a byte size with its unit, or a bare number of MiB.
std::optional<double> typed_bytes(const QString& text) {
  bool number = false;
  const double mib = text.trimmed().toDouble(&number);
  if (number) return mib * kMiB;
  if (const auto b = parse_byte_size(text.trimmed().toStdString())) return static_cast<double>(*b);
  return std::nullopt;
}
}  // namespace

ByteSizeBox::ByteSizeBox(QWidget* parent) : QDoubleSpinBox(parent) {
  setDecimals(6);  // a typed "500 MB" keeps its bytes; the text shows two decimals
  setRange(0.01, 1e9);
  setSingleStep(0.25);
  setKeyboardTracking(false);
  setToolTip(tr("Type a size with its unit (2GiB, 1.5 GB, 300 MiB) or a number of MiB"));
}

qint64 ByteSizeBox::bytes() const { return static_cast<qint64>(std::llround(value() * kMiB)); }
void ByteSizeBox::setBytes(qint64 bytes) { setValue(static_cast<double>(bytes) / kMiB); }

QValidator::State ByteSizeBox::validate(QString& text, int&) const {
  if (typed_bytes(text)) return QValidator::Acceptable;
  if (!specialValueText().isEmpty() && text.trimmed() == specialValueText()) return QValidator::Acceptable;  // e.g. "all"
  return QValidator::Intermediate;  // a unit half typed
}

double ByteSizeBox::valueFromText(const QString& text) const {
  if (!specialValueText().isEmpty() && text.trimmed() == specialValueText()) return minimum();
  const auto b = typed_bytes(text);
  return b ? *b / kMiB : value();
}

void ByteSizeBox::fixup(QString& text) const {
  // Called with what was entered when it is no size: the box then shows its value again, which read
  // as the entry silently ignored.
  if (text.trimmed().isEmpty() || typed_bytes(text)) return;
  if (!specialValueText().isEmpty() && text.trimmed() == specialValueText()) return;
  const QString why = tr("“%1” is not a size: type one with its unit, e.g. 12 MiB or 1.5 GB").arg(text.trimmed());
  auto* self = const_cast<ByteSizeBox*>(this);  // fixup() is const in Qt's signature; the signal is not
  QToolTip::showText(mapToGlobal(QPoint(0, height())), why, self);
  QMetaObject::invokeMethod(self, [self, why] { Q_EMIT self->refused(why); }, Qt::QueuedConnection);
}

QString ByteSizeBox::textFromValue(double mib) const {
  return QString::fromStdString(format_bytes(static_cast<std::uint64_t>(std::llround(mib * kMiB))));
}

}  // namespace mosaic::ui
