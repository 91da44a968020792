#pragma once
// A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot(), torch-allocator-spec §10) in
// FragScope's compact form: the final segments with their blocks, one TraceEvent vector per
// device, and interned stack frames. read_snapshot() streams the pickle (plain or gzip) through a
// data-only pickle machine that never executes anything; bad input is a fragscope::InputError
// naming the file, the byte offset and what was expected.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/block_state.h"
#include "engine/core/strong_id.h"
#include "engine/core/trace.h"
#include "engine/core/units.h"

namespace fragscope::snapshot {

struct Frame {
  std::string filename;
  std::int64_t line = 0;
  std::string name;
  friend bool operator==(const Frame&, const Frame&) = default;
};

// Every distinct frame is stored once, every distinct stack of frames once; FrameStackId{0} is
// the empty stack, so "no stack recorded" needs no special case.
class FrameTable {
 public:
  FrameTable();
  std::uint32_t intern_frame(const Frame& frame);
  FrameStackId intern_stack(std::span<const std::uint32_t> frame_indices);

  const Frame& frame(std::uint32_t index) const { return frames_[index]; }
  std::size_t frame_count() const { return frames_.size(); }
  // Number of stacks including the empty stack 0.
  std::size_t stack_count() const { return stack_offsets_.size() - 1; }
  // Frame indices of a stack, innermost first (the order PyTorch records them).
  std::span<const std::uint32_t> stack(FrameStackId id) const;
  std::vector<Frame> stack_frames(FrameStackId id) const;

  friend bool operator==(const FrameTable& a, const FrameTable& b) {
    return a.frames_ == b.frames_ && a.stack_offsets_ == b.stack_offsets_ &&
           a.stack_items_ == b.stack_items_;
  }

 private:
  struct FrameHash {
    std::size_t operator()(const Frame& f) const noexcept;
  };
  std::vector<Frame> frames_;
  std::unordered_map<Frame, std::uint32_t, FrameHash> frame_index_;
  std::vector<std::uint32_t> stack_offsets_;  // stack i = items [offsets[i], offsets[i+1])
  std::vector<std::uint32_t> stack_items_;
  static std::uint64_t hash_stack(std::span<const std::uint32_t> frame_indices);
  std::unordered_multimap<std::uint64_t, std::uint32_t> stack_index_;  // hash -> stack id
};

using fragscope::BlockState;  // engine/core/block_state.h

enum class PoolKind : std::uint8_t { small, large };
std::string_view to_string(PoolKind pool);

struct Block {
  std::uint64_t address = 0;
  Bytes size = 0;
  Bytes requested_size = 0;  // stale for inactive blocks (torch-allocator-spec §2.1)
  BlockState state = BlockState::inactive;
  FrameStackId frames{};
  friend bool operator==(const Block&, const Block&) = default;
};

struct Segment {
  int device = 0;
  std::uint64_t address = 0;
  Bytes total_size = 0;
  Bytes allocated_size = 0;
  Bytes active_size = 0;
  Bytes requested_size = 0;
  StreamId stream{};
  PoolKind pool = PoolKind::large;
  std::pair<std::int64_t, std::int64_t> pool_id{0, 0};  // (0,0) = the default pools
  bool is_expandable = false;
  FrameStackId frames{};
  std::vector<Block> blocks;  // address order
  friend bool operator==(const Segment&, const Segment&) = default;
};

// Which layout the file used (torch-allocator-spec §14.4).
enum class SnapshotFormat : std::uint8_t {
  v2_1,  // blocks carry `address` and `frames`; traces carry `time_us`
  v2_0,  // blocks carry `history`, no block address, no `time_us`
};

struct Snapshot {
  std::vector<Segment> segments;  // sorted by (device, address) as PyTorch writes them
  std::vector<std::vector<TraceEvent>> device_traces;            // index = device
  nlohmann::json allocator_settings = nlohmann::json::object();  // as recorded (2.x+)
  nlohmann::json external_annotations = nlohmann::json::array();
  FrameTable frames;
  SnapshotFormat format = SnapshotFormat::v2_1;
  int pickle_protocol = 4;
  // Notes for the user about how this snapshot was made (e.g. an export from storage that had to
  // approximate segments). Not written to the pickle; not part of equality.
  std::vector<std::string> warnings;

  std::size_t device_count() const;
  std::size_t trace_entry_count() const;
  friend bool operator==(const Snapshot& a, const Snapshot& b) {
    return a.segments == b.segments && a.device_traces == b.device_traces &&
           a.allocator_settings == b.allocator_settings &&
           a.external_annotations == b.external_annotations && a.frames == b.frames &&
           a.format == b.format;
  }
};

// Limits that keep a hostile file from exhausting memory or the stack.
struct ReadLimits {
  std::size_t max_nesting = 64;           // containers inside containers
  std::size_t max_stack = 16u << 20;      // pickle VM stack entries
  std::uint64_t max_string = 1ull << 30;  // one str/bytes object
  std::uint64_t max_memo_gap = 1u << 16;  // PUT index beyond the memo's current size
  std::uint64_t max_decompressed = 1ull << 40;
};

// Reads a snapshot pickle, plain or gzip (detected by its magic bytes).
Snapshot read_snapshot(const std::filesystem::path& path, const ReadLimits& limits = {});
// The same from memory; `name` stands for the file in error messages.
Snapshot read_snapshot_from_memory(std::span<const std::uint8_t> data, std::string_view name,
                                   const ReadLimits& limits = {});

}  // namespace fragscope::snapshot
