#pragma once
// SVG export of a QCustomPlot (it has savePng and savePdf of its own, but no SVG).
#include <QString>

class QCustomPlot;

namespace mosaic::ui {

// Draws `plot` at width × height into an SVG file; false when the file was not written.
bool savePlotSvg(QCustomPlot& plot, const QString& file, int width, int height, const QString& title = {});

}  // namespace mosaic::ui
