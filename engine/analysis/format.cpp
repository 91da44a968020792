#include "engine/analysis/format.h"

#include <cstdio>

namespace fragscope::analysis {

std::string format_size(Bytes size) {
  if (size <= kKiB)
    return std::to_string(size) + " bytes";
  double value = 0;
  const char* unit = "";
  if (size <= kMiB) {
    value = static_cast<double>(size) / static_cast<double>(kKiB);
    unit = " KiB";
  } else if (size <= kGiB) {
    value = static_cast<double>(size) / static_cast<double>(kMiB);
    unit = " MiB";
  } else {
    value = static_cast<double>(size) / static_cast<double>(kGiB);
    unit = " GiB";
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.2f%s", value, unit);
  return text;
}

}  // namespace fragscope::analysis
