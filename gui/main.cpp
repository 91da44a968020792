#include "engine/core/malloc_tuning.h"
#include "gui/application.h"

int main(int argc, char** argv) {
  fragscope::use_huge_page_malloc(argv);  // opening a large run fills large buffers
  return fragscope::gui::runApplication(argc, argv);
}
