#include "gui/application.h"

int main(int argc, char** argv) {
  return fragscope::gui::runApplication(argc, argv);
}
