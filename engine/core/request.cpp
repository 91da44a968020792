#include "engine/core/request.h"

namespace fragscope {

std::string_view to_string(Category category) {
  switch (category) {
    case Category::unknown:
      return "unknown";
    case Category::parameter:
      return "parameter";
    case Category::gradient:
      return "gradient";
    case Category::optimizer_state:
      return "optimizer_state";
    case Category::activation:
      return "activation";
    case Category::temporary:
      return "temporary";
    case Category::input:
      return "input";
  }
  return "unknown";
}

}  // namespace fragscope
