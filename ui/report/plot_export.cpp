#include "report/plot_export.h"

#include <QFile>
#include <QSvgGenerator>

#include "report/qcustomplot_include.h"

namespace mosaic::ui {

bool savePlotSvg(QCustomPlot& plot, const QString& file, int width, int height, const QString& title) {
  QFile::remove(file);
  {
    QSvgGenerator gen;
    gen.setFileName(file);
    gen.setSize(QSize(width, height));
    gen.setViewBox(QRect(0, 0, width, height));
    gen.setTitle(title);
    QCPPainter painter(&gen);
    plot.toPainter(&painter, width, height);
  }  // the generator writes the file when the painter ends
  return QFile::exists(file);
}

}  // namespace mosaic::ui
