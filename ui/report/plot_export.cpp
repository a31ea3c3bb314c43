#include "report/plot_export.h"

#include <QFile>
#include <QFileInfo>
#include <QSvgGenerator>

#include <algorithm>

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

QString exportPlot(QCustomPlot& plot, const QString& file, const QString& title, int width, int height) {
  const QString suffix = QFileInfo(file).suffix().toLower();
  if (suffix != QStringLiteral("png") && suffix != QStringLiteral("svg") && suffix != QStringLiteral("pdf"))
    return QStringLiteral("%1: '.%2' is not a format the export writes; name the file .png, .svg or .pdf").arg(file, suffix);
  // The title as the plot's first row while the file is drawn.
  QCPTextElement* heading = nullptr;
  if (!title.isEmpty()) {
    plot.plotLayout()->insertRow(0);
    heading = new QCPTextElement(&plot, title, QFont(QStringLiteral("sans"), 12, QFont::Bold));
    plot.plotLayout()->addElement(0, 0, heading);
  }
  bool written = false;
  if (suffix == QStringLiteral("png")) written = plot.savePng(file, width, height, 2.0);
  else if (suffix == QStringLiteral("pdf")) written = plot.savePdf(file, width, height);
  else written = savePlotSvg(plot, file, width, height, title);
  if (heading) {
    plot.plotLayout()->remove(heading);
    plot.plotLayout()->simplify();
    plot.replot();
  }
  return written ? QString() : QStringLiteral("%1 could not be written (check the folder exists and is writable)").arg(file);
}

void placeLegendBelow(QCustomPlot& plot, int width) {
  plot.legend->setVisible(true);
  const bool inside = plot.axisRect()->insetLayout()->elements(false).contains(plot.legend);
  if (inside) {  // where QCustomPlot puts it: styled for a row once
    plot.axisRect()->insetLayout()->take(plot.legend);
    plot.legend->setBorderPen(Qt::NoPen);
    plot.legend->setMargins(QMargins(4, 0, 4, 0));
    plot.legend->setIconSize(24, 12);
  }
  if (!plot.plotLayout()->elements(false).contains(plot.legend)) {  // from inside, or out of every layout
    plot.plotLayout()->addElement(plot.plotLayout()->rowCount(), 0, plot.legend);
    plot.plotLayout()->setRowStretchFactor(plot.plotLayout()->rowCount() - 1, 0.001);
  }
  const QFontMetrics metrics(plot.legend->font());
  int widest = 0;
  for (int i = 0; i < plot.legend->itemCount(); ++i)
    if (auto* item = qobject_cast<QCPPlottableLegendItem*>(plot.legend->item(i)))
      widest = std::max(widest, metrics.horizontalAdvance(item->plottable()->name()));
  const int entry = widest + plot.legend->iconSize().width() + 3 * 8;  // name, icon, paddings and spacing
  plot.legend->setWrap(std::clamp(width / std::max(entry, 1), 1, 6));
  plot.legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
}

}  // namespace mosaic::ui
