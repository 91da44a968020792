#pragma once
// One frame of a recorded stack as PyTorch records it: what the snapshot reader interns
// (snapshot::FrameTable) and the storage layer writes and reads back (RunStore::frame_stack).
#include <cstdint>
#include <string>

namespace fragscope {

struct Frame {
  std::string filename;
  std::int64_t line = 0;
  std::string name;  // the function
  friend bool operator==(const Frame&, const Frame&) = default;
};

}  // namespace fragscope
