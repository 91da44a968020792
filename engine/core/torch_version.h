#pragma once
// A PyTorch release as major.minor: the allocator's behaviour and the snapshot's format changed
// between releases (torch-allocator-spec §14), so the model and the reader take one of these as a
// profile. Patch releases never changed the allocator, so they are not part of the value.
#include <compare>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fragscope {

struct TorchVersion {
  int major = 2;
  int minor = 11;

  constexpr auto operator<=>(const TorchVersion&) const = default;

  // "2.5", "2.5.1", "2.5.0a0+git..." all give 2.5; anything else gives nullopt.
  static std::optional<TorchVersion> parse(std::string_view text);
  std::string to_string() const;  // "2.5"
};

// The newest release the model reproduces; also the profile used when nothing says otherwise.
inline constexpr TorchVersion kLatestTorch{2, 11};
// The oldest release whose snapshots we read (2.0 introduced _dump_snapshot).
inline constexpr TorchVersion kOldestTorch{2, 0};

// Every release between kOldestTorch and kLatestTorch, oldest first.
std::vector<TorchVersion> known_torch_versions();

}  // namespace fragscope
