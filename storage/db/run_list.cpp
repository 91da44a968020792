#include "storage/db/run_list.h"

#include <charconv>
#include <cstdint>
#include <string>

#include "engine/core/error.h"

namespace fragscope::storage {
namespace {

std::string_view trimmed(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!text.empty() && space(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && space(text.back()))
    text.remove_suffix(1);
  return text;
}

}  // namespace

std::vector<RunId> parse_run_list(std::string_view text) {
  std::vector<RunId> runs;
  if (trimmed(text).empty())
    throw InputError("no run ids given (expected positive integers separated by commas, e.g. 3,7)");
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trimmed(text.substr(0, comma));
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || error != std::errc{} || end != item.data() + item.size() || value <= 0)
      throw InputError("\"" + std::string(item) +
                       "\" is not a run id (expected positive integers separated by commas, "
                       "e.g. 3,7)");
    runs.push_back(RunId{value});
    if (comma == std::string_view::npos)
      return runs;
    text.remove_prefix(comma + 1);
  }
}

}  // namespace fragscope::storage
