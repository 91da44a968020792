#pragma once
// Reading a user's file safely: only regular files (a FIFO or a device would block in open() or
// never end), within a size bound, and JSON documents with bounded nesting (nlohmann's copies and
// comparisons recurse, so a document nested 200k deep would overflow the stack long after
// parsing). Every refusal is an InputError naming the file, the place and the limit.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fragscope {

// Throws InputError unless `path` names a regular file (after following symlinks). `what` says
// what the file was for ("experiment file", "stats file").
void require_regular_file(const std::filesystem::path& path, std::string_view what);

// The same for a path that exists: a FIFO, device, socket or directory is an InputError; a
// missing file passes, for the caller's open() to report.
void refuse_special_file(const std::filesystem::path& path, std::string_view what);

struct JsonLimits {
  // Deeper nesting than any FragScope document has (experiments use 3 levels, stats files 4).
  std::size_t max_depth = 64;
  // Larger than any experiment or stats file (a few KiB); the whole file is read into memory.
  std::uint64_t max_bytes = 64ull << 20;
};

// Parses `text` as JSON. Bad JSON, nesting deeper than `limits.max_depth` and numbers a double
// cannot hold (1e400) are InputErrors "SOURCE: line L, column C: ...".
nlohmann::json parse_json_text(std::string_view text, std::string_view source,
                               const JsonLimits& limits = {});

// require_regular_file, then the size bound, then parse_json_text.
nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view what,
                              const JsonLimits& limits = {});

}  // namespace fragscope
