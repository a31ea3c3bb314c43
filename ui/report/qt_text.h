#pragma once
// Core's UTF-8 strings as Qt's, in one short name for the report's many labels.
#include <QString>
#include <string>

namespace mosaic::ui {

inline QString q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace mosaic::ui
