// render-icon: draws the project's SVG icon as a square PNG of each size asked, for the hicolor
// theme (Debian's desktops look for PNGs at fixed sizes beside the scalable one). Build time only.
//   render-icon ICON.svg OUT_DIR 16 24 32 …   →   OUT_DIR/<size>/mosaic.png
#include <QDir>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QSvgRenderer>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: render-icon ICON.svg OUT_DIR SIZE...\n");
    return 2;
  }
  qputenv("QT_QPA_PLATFORM", "offscreen");  // no display at build time
  QGuiApplication app(argc, argv);
  QSvgRenderer svg(QString::fromLocal8Bit(argv[1]));
  if (!svg.isValid()) {
    std::fprintf(stderr, "render-icon: %s is not an SVG Qt can draw\n", argv[1]);
    return 1;
  }
  for (int i = 3; i < argc; ++i) {
    const int size = QByteArray(argv[i]).toInt();
    if (size <= 0) {
      std::fprintf(stderr, "render-icon: '%s' is not a size in pixels\n", argv[i]);
      return 2;
    }
    QImage image(size, size, QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::transparent);
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    svg.render(&painter);
    painter.end();
    const QString dir = QString::fromLocal8Bit(argv[2]) + QStringLiteral("/%1").arg(size);
    if (!QDir().mkpath(dir) || !image.save(dir + QStringLiteral("/mosaic.png"))) {
      std::fprintf(stderr, "render-icon: cannot write %s/mosaic.png\n", qPrintable(dir));
      return 1;
    }
  }
  return 0;
}
