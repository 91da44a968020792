#pragma once
// PyTorch's MempoolId_t: which pool a segment belongs to. (0,0) is the default pools; a CUDA
// graph's private pool and a torch.cuda.MemPool each have their own id (snapshots write it as
// `segment_pool_id`). PyTorch 2.11 numbers graph pools (n,0) and MemPools (0,n).
#include <compare>
#include <cstdint>
#include <string>

namespace fragscope {

struct MempoolId {
  std::uint64_t first = 0;
  std::uint64_t second = 0;

  bool is_default() const { return first == 0 && second == 0; }
  friend auto operator<=>(const MempoolId&, const MempoolId&) = default;
  friend bool operator==(const MempoolId&, const MempoolId&) = default;
};

// "(0, 1)", as Python prints the tuple.
inline std::string to_string(const MempoolId& id) {
  return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")";
}

}  // namespace fragscope
