#pragma once
// Exporting a QCustomPlot (it has savePng and savePdf of its own, but no SVG), and placing its
// legend where it never covers data.
#include <QString>

class QCustomPlot;

namespace mosaic::ui {

// Draws `plot` at width × height into an SVG file; false when the file was not written.
bool savePlotSvg(QCustomPlot& plot, const QString& file, int width, int height, const QString& title = {});

// Exports `plot` with `title` above it, in the format its extension names (.png at 2× for print,
// .svg, .pdf), at width × height whatever its size on screen. Returns an empty string on success,
// else why not (an extension that is no such format, a file that could not be written).
QString exportPlot(QCustomPlot& plot, const QString& file, const QString& title, int width = 1200, int height = 900);

// Moves the legend (shown) from inside the axes, or from out of every layout, to a row of its own
// under them, in as many columns as its entries fit across `width` pixels; call again when entries
// are added or the width changes.
void placeLegendBelow(QCustomPlot& plot, int width);

}  // namespace mosaic::ui
