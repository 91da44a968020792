#pragma once
// A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot(), torch-allocator-spec §10) in
// FragScope's compact form: the final segments with their blocks, one TraceEvent vector per
// device, and interned stack frames. read_snapshot() streams the pickle (plain or gzip) through a
// data-only pickle machine that never executes anything; bad input is a fragscope::InputError
// naming the file, the byte offset and what was expected.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/allocator/config.h"
#include "engine/core/block_state.h"
#include "engine/core/frame.h"
#include "engine/core/pool_kind.h"
#include "engine/core/strong_id.h"
#include "engine/core/torch_version.h"
#include "engine/core/trace.h"
#include "engine/core/units.h"
#include "engine/snapshot/event_spool.h"

namespace fragscope::snapshot {

// Every distinct frame is stored once, every distinct stack of frames once; FrameStackId{0} is
// the empty stack, so "no stack recorded" needs no special case.
class FrameTable {
 public:
  FrameTable();
  std::uint32_t intern_frame(const Frame& frame);
  FrameStackId intern_stack(std::span<const std::uint32_t> frame_indices);
  // The stack of these frames if it was interned, without interning it.
  std::optional<FrameStackId> find_stack(std::span<const std::uint32_t> frame_indices) const;

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
  std::optional<FrameStackId> find_stack(std::span<const std::uint32_t> frame_indices,
                                         std::uint64_t hash) const;
  std::unordered_multimap<std::uint64_t, std::uint32_t> stack_index_;  // hash -> stack id
};

using fragscope::BlockState;  // engine/core/block_state.h

using fragscope::PoolKind;  // engine/core/pool_kind.h

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

// The text fields a trace entry carries besides the event (2.8+ `compile_context`, 2.10+
// `user_metadata`), as indices into Snapshot::entry_texts; 0 = the key was absent.
struct TraceEntryText {
  std::uint32_t compile_context = 0;
  std::uint32_t user_metadata = 0;
  friend bool operator==(const TraceEntryText&, const TraceEntryText&) = default;
};

// What the file's layout says about the PyTorch release that wrote it (torch-allocator-spec
// §14.4): the releases whose format matches, oldest..newest, and why. A format that several
// releases share gives a range; the newest of it is the profile replay assumes.
struct TorchVersionGuess {
  TorchVersion oldest = kLatestTorch;
  TorchVersion newest = kLatestTorch;
  std::string evidence;  // e.g. "allocator_settings without graph_capture_record_stream_reuse, ..."
  bool from_override = false;  // set by the user (--torch-version), not read from the format

  TorchVersion profile() const { return newest; }
  std::string range() const;     // "2.5-2.7" or "2.8"
  std::string describe() const;  // "2.5-2.7 (from ...)"
  friend bool operator==(const TorchVersionGuess&, const TorchVersionGuess&) = default;
};

// The layout facts read while parsing that tell releases apart.
struct FormatFeatures {
  bool segments_list_only = false;  // torch.cuda.memory_snapshot(): no dict around the segments
  bool block_history = false;       // 2.0 blocks: `history`, no `address`
  bool allocator_settings = false;
  bool external_annotations = false;
  bool settings_graph_capture_key = false;  // graph_capture_record_stream_reuse (2.9+)
  std::uint64_t trace_entries = 0;
  std::uint64_t entries_with_time = 0;
  std::uint64_t entries_with_compile_context = 0;
  std::uint64_t entries_with_user_metadata = 0;
  std::vector<std::string> unknown_keys;  // keys no release we know writes, e.g. "snapshot.foo"
  friend bool operator==(const FormatFeatures&, const FormatFeatures&) = default;
};

// The release a file's features point at (the rules behind the real-world manifest's
// version_guess, checked against all 167 files in tests/engine/snapshot/real_world_test.cpp).
TorchVersionGuess guess_torch_version(const FormatFeatures& features);

struct Snapshot {
  std::vector<Segment> segments;  // sorted by (device, address) as PyTorch writes them
  std::vector<std::vector<TraceEvent>> device_traces;  // index = device
  // read_snapshot_spooled: the traces packed instead (device_traces then holds one empty vector
  // per device, and no entry texts are kept); empty otherwise. trace_size / trace_blocks read
  // either form.
  std::vector<EventSpool> device_spools;
  nlohmann::json allocator_settings = nlohmann::json::object();  // as recorded (2.x+)
  // False when the file has no `allocator_settings` (2.0-2.2, memory_snapshot()): the config it
  // ran under is unknown, and replay assumes the defaults (alloc::read_allocator_settings says so).
  bool allocator_settings_recorded = false;
  nlohmann::json external_annotations = nlohmann::json::array();
  // Parallel to device_traces when any entry carries compile_context / user_metadata, else empty.
  std::vector<std::vector<TraceEntryText>> device_entry_texts;
  std::vector<std::string> entry_texts{std::string()};  // index 0 = absent
  FrameTable frames;
  SnapshotFormat format = SnapshotFormat::v2_1;
  FormatFeatures features;
  TorchVersionGuess torch_version;
  int pickle_protocol = 4;
  // Notes for the user about how this snapshot was made (e.g. an export from storage that had to
  // approximate segments). Not written to the pickle; not part of equality.
  std::vector<std::string> warnings;

  // Devices with a trace list or a segment: a device whose list is empty still counts.
  std::size_t device_count() const;
  // The device an analysis of "the snapshot" looks at: the one with the most trace entries;
  // without any, the one with the most segments (a state-only snapshot); 0 for an empty one.
  std::size_t busiest_device() const;
  std::size_t trace_entry_count() const;
  // The entries of one device's trace, in either form (0 / none for a device without one).
  std::size_t trace_size(std::size_t device) const;
  TraceBlocks trace_blocks(std::size_t device) const;
  // The device's trace when it is packed in a spool (read_snapshot_spooled); nullptr when it is
  // a vector in device_traces, or the device has none.
  const EventSpool* spool(std::size_t device) const;
  // The compile_context / user_metadata of entry `index` of `device` ("" when absent).
  std::string_view compile_context(std::size_t device, std::size_t index) const;
  std::string_view user_metadata(std::size_t device, std::size_t index) const;
  // Every entry's (compile_context, user_metadata) text, for comparing snapshots.
  std::vector<std::vector<std::pair<std::string, std::string>>> entry_text_strings() const;
  friend bool operator==(const Snapshot& a, const Snapshot& b) {
    return a.segments == b.segments && a.device_traces == b.device_traces &&
           a.device_spools == b.device_spools && a.allocator_settings == b.allocator_settings &&
           a.external_annotations == b.external_annotations && a.frames == b.frames &&
           a.format == b.format && a.entry_text_strings() == b.entry_text_strings();
  }
};

// Limits that keep a hostile file from exhausting memory or the stack.
// Memory stays bounded by what the input can legitimately need: the pickle machine's own
// structures grow at most linearly with the bytes read, and the walk over the parsed objects
// (where shared objects could be expanded again and again) is limited to a multiple of them.
struct ReadLimits {
  std::size_t max_nesting = 64;               // containers inside containers
  std::size_t max_stack = 16u << 20;          // pickle VM stack entries
  std::uint64_t max_string = 64ull << 20;     // one str/bytes object (a frame name is < 1 MiB)
  std::uint64_t max_text_bytes = 1ull << 30;  // all distinct str/bytes objects together
  std::uint64_t max_memo_gap = 1u << 16;      // PUT index beyond the memo / the bytes read
  std::uint64_t max_decompressed = 1ull << 40;
  std::size_t max_devices = 1024;  // device_traces lists / segment 'device' (PyTorch: <= 512)
  // Values the schema walk may visit (segments, blocks, allocator_settings, annotations):
  // at least this many, else `expansion_per_byte` per byte of the pickle.
  std::uint64_t min_expansion = 1u << 22;
  std::uint64_t expansion_per_byte = 4;
};

// The allocator config the snapshot recorded, with what it did not record (absent settings:
// unknown, the defaults assumed). An AllocatorConfigError for a mistyped value.
alloc::RecordedAllocatorConfig recorded_allocator_config(const Snapshot& snapshot);
// The user's --torch-version in place of the guess from the format.
void override_torch_version(Snapshot& snapshot, TorchVersion version);

// Reads a snapshot pickle, plain or gzip (detected by its magic bytes).
Snapshot read_snapshot(const std::filesystem::path& path, const ReadLimits& limits = {});
// The same from memory; `name` stands for the file in error messages.
Snapshot read_snapshot_from_memory(std::span<const std::uint8_t> data, std::string_view name,
                                   const ReadLimits& limits = {});
// The same with the traces in device_spools (~11 bytes an entry instead of 48), for an import that
// only walks them: no per-entry compile_context / user_metadata texts are kept (the features
// still count them).
Snapshot read_snapshot_spooled(const std::filesystem::path& path, const ReadLimits& limits = {});
Snapshot read_snapshot_spooled_from_memory(std::span<const std::uint8_t> data,
                                           std::string_view name, const ReadLimits& limits = {});

}  // namespace fragscope::snapshot
