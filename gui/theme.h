#pragma once
// Light and dark palettes on the Fusion style (the same look on every desktop); pages recolour
// their plots on QEvent::PaletteChange.
#include <QPalette>

namespace fragscope::gui {

QPalette lightPalette();
QPalette darkPalette();
// Applies the palette to the whole application.
void applyTheme(bool dark);

}  // namespace fragscope::gui
