#pragma once
// The state of a block as PyTorch's snapshots name it; shared by the allocator model and the
// snapshot reader so a modelled block and a recorded one compare directly.
#include <cstdint>
#include <string_view>

namespace fragscope {

enum class BlockState : std::uint8_t { active_allocated, active_pending_free, inactive };

// PyTorch's snapshot strings: "active_allocated", "active_pending_free", "inactive".
std::string_view to_string(BlockState state);

}  // namespace fragscope
