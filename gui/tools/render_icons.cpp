// Renders the SVG application icon to the hicolor PNG sizes (16-512 px). Run by hand after
// editing the SVG: fragscope-render-icons resources/icons/io.github.fragscope.FragScope.svg
// resources/icons; the PNGs are committed so packaging needs no renderer.
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QSvgRenderer>
#include <cstdio>

int main(int argc, char** argv) {
  QGuiApplication app(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: fragscope-render-icons ICON.svg OUTPUT_DIR\n");
    return 2;
  }
  QSvgRenderer renderer(QString::fromLocal8Bit(argv[1]));
  if (!renderer.isValid()) {
    std::fprintf(stderr, "fragscope-render-icons: %s is not a valid SVG\n", argv[1]);
    return 2;
  }
  for (int size : {16, 32, 48, 64, 128, 256, 512}) {
    QImage image(size, size, QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::transparent);
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    renderer.render(&painter);
    painter.end();
    const QString path =
        QStringLiteral("%1/fragscope-%2.png").arg(QString::fromLocal8Bit(argv[2])).arg(size);
    if (!image.save(path)) {
      std::fprintf(stderr, "fragscope-render-icons: cannot write %s\n", qPrintable(path));
      return 1;
    }
  }
  return 0;
}
