#include "gui/format.h"

#include <QLocale>
#include <QObject>
#include <array>
#include <cmath>

namespace fragscope::gui {

QString formatBytes(double bytes) {
  static constexpr std::array<const char*, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double value = std::fabs(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  QString number;
  if (unit == 0)
    number = QString::number(static_cast<qint64>(value));
  else if (value >= 100)
    number = QString::number(value, 'f', 0);
  else if (value >= 10)
    number = QString::number(value, 'f', 1);
  else
    number = QString::number(value, 'f', 2);
  return (negative ? QStringLiteral("-") : QString()) + number + QLatin1Char(' ') +
         QLatin1String(kUnits[unit]);
}

QString formatCount(std::uint64_t count) {
  return QLocale(QLocale::English).toString(static_cast<qulonglong>(count));
}

QString formatBytesDelta(double delta) {
  if (delta == 0)
    return QStringLiteral("±0");
  const QString magnitude = formatBytes(std::fabs(delta));
  return (delta > 0 ? QStringLiteral("+") : QStringLiteral("\u2212")) + magnitude;
}

QString formatAllowed(double bytes) {
  return QObject::tr("%1 allowed").arg(formatBytes(bytes));
}

namespace colors {
QColor run(int index) {
  // Twelve hues that stay apart on the light and the dark plot (nine runs of a sweep each get
  // their own); none is the OOM red the markers and limit lines use.
  static const std::array<QColor, 12> kRunColors{
      QColor(0x2b, 0x7b, 0xd6), QColor(0xe0, 0x8a, 0x1e), QColor(0x3b, 0xa5, 0x5c),
      QColor(0xc0, 0x39, 0x7a), QColor(0x8e, 0x6c, 0xc8), QColor(0x17, 0xa2, 0xb8),
      QColor(0x8c, 0x6d, 0x31), QColor(0x6c, 0x75, 0x7d), QColor(0xa8, 0xa8, 0x1a),
      QColor(0xf0, 0x6e, 0xaa), QColor(0x2c, 0x3e, 0x91), QColor(0x5f, 0xd3, 0x9a)};
  return kRunColors[static_cast<std::size_t>(index) % kRunColors.size()];
}

QColor category(Category kind) {
  switch (kind) {
    case Category::parameter:
      return {0x6c, 0x7f, 0xa8};
    case Category::optimizer_state:
      return {0x8e, 0x6c, 0xc0};
    case Category::gradient:
      return {0x2a, 0xa1, 0x98};
    case Category::activation:
      return {0xc9, 0xa2, 0x27};
    case Category::temporary:
      return {0xd0, 0x67, 0x9a};
    case Category::input:
      return {0xa0, 0x78, 0x5a};
    case Category::unknown:
      break;
  }
  return {0x8a, 0x8f, 0x98};
}
}  // namespace colors

}  // namespace fragscope::gui
