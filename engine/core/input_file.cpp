#include "engine/core/input_file.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace fragscope {
namespace {

std::string kind_of(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::fifo:
      return "a FIFO (named pipe)";
    case std::filesystem::file_type::directory:
      return "a directory";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::character:
      return "a character device";
    case std::filesystem::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

struct Place {
  std::size_t line = 1;
  std::size_t column = 1;
};

std::string where(std::string_view source, const Place& place) {
  return std::string(source) + ": line " + std::to_string(place.line) + ", column " +
         std::to_string(place.column);
}

bool starts_number(char c) {
  return c == '-' || (c >= '0' && c <= '9');
}

bool in_number(char c) {
  return starts_number(c) || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// One pass over the text outside strings: nesting depth and numbers that overflow a double, both
// reported with their line and column. Syntax errors are left to the parser.
void prescan(std::string_view text, std::string_view source, const JsonLimits& limits) {
  std::size_t depth = 0;
  Place place;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits.max_depth)
        throw InputError(where(source, place) + ": JSON nested deeper than " +
                         std::to_string(limits.max_depth) + " levels");
    } else if (c == ']' || c == '}') {
      if (depth > 0)
        --depth;
    } else if (starts_number(c)) {
      std::size_t end = i;
      while (end < text.size() && in_number(text[end]))
        ++end;
      const std::string number(text.substr(i, end - i));
      errno = 0;
      const double value = std::strtod(number.c_str(), nullptr);
      if (errno == ERANGE && std::isinf(value))
        throw InputError(where(source, place) + ": the number " + number.substr(0, 40) +
                         " is out of range (at most about 1.8e308)");
      place.column += end - i - 1;
      i = end - 1;
    }
    if (c == '\n') {
      ++place.line;
      place.column = 1;
    } else {
      ++place.column;
    }
  }
}

}  // namespace

void require_regular_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found)
    throw InputError(path.string() + ": no such file (the " + std::string(what) + ")");
  if (error) {
    throw InputError(path.string() + ": cannot open the " + std::string(what) + " (" +
                     error.message() + ")");
  }
  if (status.type() != std::filesystem::file_type::regular) {
    throw InputError(path.string() + ": the " + std::string(what) + " is " +
                     kind_of(status.type()) + "; FragScope reads regular files only");
  }
}

void refuse_special_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!error && status.type() != std::filesystem::file_type::regular)
    require_regular_file(path, what);
}

nlohmann::json parse_json_text(std::string_view text, std::string_view source,
                               const JsonLimits& limits) {
  prescan(text, source, limits);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's text is "[json.exception.parse_error.101] parse error at line 2, column 3: ..."
    std::string message = e.what();
    if (const auto bracket = message.find("] ");
        message.rfind("[json.", 0) == 0 && bracket != std::string::npos)
      message.erase(0, bracket + 2);
    throw InputError(std::string(source) + ": not valid JSON: " + message);
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view what,
                              const JsonLimits& limits) {
  require_regular_file(path, what);
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (!error && size > limits.max_bytes) {
    throw InputError(path.string() + ": the " + std::string(what) + " is " + std::to_string(size) +
                     " bytes; at most " + std::to_string(limits.max_bytes) + " are read");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(path.string() + ": cannot open the " + std::string(what));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad())
    throw InputError(path.string() + ": cannot read the " + std::string(what));
  return parse_json_text(content.view(), path.string(), limits);
}

}  // namespace fragscope
