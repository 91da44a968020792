#pragma once
#include <string>

namespace fragscope::storage {

// The default database: $XDG_DATA_HOME/fragscope/fragscope.db, i.e. ~/.local/share/fragscope/
// when XDG_DATA_HOME is unset. The GUI, the CLI and installer/run.sh all agree on it.
std::string default_database_path();

}  // namespace fragscope::storage
