#include "storage/db/data_location.h"

#include <cstdlib>
#include <filesystem>

namespace fragscope::storage {

std::string default_database_path() {
  std::filesystem::path base;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = std::filesystem::path(home) / ".local" / "share";
  } else {
    base = ".";
  }
  return (base / "fragscope" / "fragscope.db").string();
}

}  // namespace fragscope::storage
