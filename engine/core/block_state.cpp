#include "engine/core/block_state.h"

namespace fragscope {

std::string_view to_string(BlockState state) {
  switch (state) {
    case BlockState::active_allocated:
      return "active_allocated";
    case BlockState::active_pending_free:
      return "active_pending_free";
    case BlockState::inactive:
      return "inactive";
  }
  return "inactive";
}

}  // namespace fragscope
