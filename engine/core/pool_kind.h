#pragma once
// The caching allocator's two block pools (torch-allocator-spec §1): small (rounded sizes up to
// 1 MiB, carved from 2 MiB segments) and large. One type for the allocator model, the snapshot
// reader and the analyses, so a modelled segment and a recorded one compare directly.
#include <cstdint>
#include <string_view>

namespace fragscope {

enum class PoolKind : std::uint8_t { small, large };

// "small" / "large", as a snapshot's segment_type says.
constexpr std::string_view to_string(PoolKind pool) {
  return pool == PoolKind::small ? "small" : "large";
}

}  // namespace fragscope
