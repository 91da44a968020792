#include "engine/core/torch_version.h"

#include <charconv>

namespace fragscope {

namespace {

std::optional<int> leading_number(std::string_view& text) {
  int value = 0;
  const auto* begin = text.data();
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || ptr == begin)
    return std::nullopt;
  text.remove_prefix(static_cast<std::size_t>(ptr - begin));
  return value;
}

}  // namespace

std::optional<TorchVersion> TorchVersion::parse(std::string_view text) {
  const auto major = leading_number(text);
  if (!major || text.empty() || text.front() != '.')
    return std::nullopt;
  text.remove_prefix(1);
  const auto minor = leading_number(text);
  if (!minor || *major < 0 || *minor < 0)
    return std::nullopt;
  // What may follow: ".patch", "a0+git…", "+cu121", nothing.
  if (!text.empty() && text.front() != '.' && text.front() != '+' && text.front() != 'a' &&
      text.front() != 'b' && text.front() != 'r' && text.front() != 'd')
    return std::nullopt;
  return TorchVersion{*major, *minor};
}

std::string TorchVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<TorchVersion> known_torch_versions() {
  std::vector<TorchVersion> versions;
  for (int minor = kOldestTorch.minor; minor <= kLatestTorch.minor; ++minor)
    versions.push_back(TorchVersion{2, minor});
  return versions;
}

}  // namespace fragscope
