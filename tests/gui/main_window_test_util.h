// The main window as the GUI tests open it: a fixed size, so layouts and screenshots compare.
#pragma once

#include <QString>
#include <memory>

#include "gui/main_window.h"

namespace fragscope::gui::test {

// The window on `db`, shown; null when the database cannot be opened.
inline std::unique_ptr<MainWindow> openMainWindow(const QString& db) {
  auto window = std::make_unique<MainWindow>();
  window->resize(1400, 900);
  if (!window->openDatabase(db))
    return nullptr;
  window->show();
  return window;
}

}  // namespace fragscope::gui::test
