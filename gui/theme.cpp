#include "gui/theme.h"

#include <QApplication>
#include <QStyle>
#include <QStyleFactory>
#include <QWidget>
#include <memory>

namespace fragscope::gui {

QPalette lightPalette() {
  // QStyleFactory::create hands over a new style; this one is only asked for its palette.
  const std::unique_ptr<QStyle> fusion(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette palette = fusion->standardPalette();
  palette.setColor(QPalette::Highlight, QColor(0x2b, 0x7b, 0xd6));
  return palette;
}

QPalette darkPalette() {
  QPalette palette;
  const QColor window(0x2b, 0x2f, 0x36);
  const QColor base(0x1e, 0x22, 0x28);
  const QColor text(0xe6, 0xe9, 0xed);
  const QColor disabled(0x7f, 0x86, 0x8e);
  palette.setColor(QPalette::Window, window);
  palette.setColor(QPalette::WindowText, text);
  palette.setColor(QPalette::Base, base);
  palette.setColor(QPalette::AlternateBase, QColor(0x25, 0x2a, 0x31));
  palette.setColor(QPalette::ToolTipBase, QColor(0x33, 0x38, 0x40));
  palette.setColor(QPalette::ToolTipText, text);
  palette.setColor(QPalette::Text, text);
  palette.setColor(QPalette::Button, window);
  palette.setColor(QPalette::ButtonText, text);
  palette.setColor(QPalette::BrightText, Qt::white);
  palette.setColor(QPalette::Link, QColor(0x6f, 0xb1, 0xff));
  palette.setColor(QPalette::Highlight, QColor(0x2b, 0x7b, 0xd6));
  palette.setColor(QPalette::HighlightedText, Qt::white);
  palette.setColor(QPalette::PlaceholderText, disabled);
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    palette.setColor(QPalette::Disabled, role, disabled);
  return palette;
}

void applyTheme(bool dark) {
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QApplication::setPalette(dark ? darkPalette() : lightPalette());
}

}  // namespace fragscope::gui
