#pragma once
// The `fragscope` command line: the workbench, or one of its batch modes.
//   fragscope [--db FILE] [SNAPSHOT...]                 open the workbench (importing files)
//   fragscope --report OUT.html|OUT.pdf --db FILE --runs A,B
//   fragscope --screenshot OUT.png [--db FILE] [--run ID | --compare A,B] [--page NAME]
// Batch modes work with QT_QPA_PLATFORM=offscreen. Exit status 0 on success, 2 on bad input.
#include <QString>
#include <optional>
#include <vector>

#include "storage/db/run_store.h"

namespace fragscope::gui {

// "3,7,12" -> run ids; std::nullopt (with `error`) when a part is not a positive integer.
std::optional<std::vector<storage::RunId>> parseRunList(const QString& text, QString* error);

// Registers metatypes and the compiled-in resources; called by runApplication and the tests.
void initializeGuiLibrary();

int runApplication(int argc, char** argv);

}  // namespace fragscope::gui
