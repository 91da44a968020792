#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/profile_choice.h"

#include <algorithm>
#include <cstring>

namespace fragscope::snapshot {

// ---- FrameTable -------------------------------------------------------------------------------

std::size_t FrameTable::FrameHash::operator()(const Frame& f) const noexcept {
  std::size_t h = std::hash<std::string>{}(f.filename);
  h ^= std::hash<std::string>{}(f.name) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= std::hash<std::int64_t>{}(f.line) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

FrameTable::FrameTable() : stack_offsets_{0, 0} {
  stack_index_.emplace(hash_stack({}), 0);
}

std::uint64_t FrameTable::hash_stack(std::span<const std::uint32_t> frame_indices) {
  // Two indices a step, in four independent lanes: one lane of a multiply per index made the
  // hash a chain of ~65 dependent multiplies for every stack of a real trace.
  constexpr std::uint64_t kMul = 0x9e3779b97f4a7c15ull;
  std::uint64_t lanes[4] = {0xcbf29ce484222325ull ^ frame_indices.size(), 1, 2, 3};
  const std::size_t n = frame_indices.size();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t l = 0; l < 4; ++l) {
      const std::uint64_t pair =
          frame_indices[i + 2 * l] | std::uint64_t{frame_indices[i + 2 * l + 1]} << 32;
      lanes[l] = (lanes[l] ^ pair) * kMul;
    }
  for (; i < n; ++i)
    lanes[i % 4] = (lanes[i % 4] ^ frame_indices[i]) * kMul;
  std::uint64_t h = lanes[0];
  for (std::size_t l = 1; l < 4; ++l)
    h = (h ^ (lanes[l] >> 29 | lanes[l] << 35)) * kMul;
  return h ^ h >> 32;
}

std::uint32_t FrameTable::intern_frame(const Frame& frame) {
  auto it = frame_index_.find(frame);
  if (it != frame_index_.end())
    return it->second;
  auto index = static_cast<std::uint32_t>(frames_.size());
  frames_.push_back(frame);
  frame_index_.emplace(frame, index);
  return index;
}

std::optional<FrameStackId> FrameTable::find_stack(std::span<const std::uint32_t> frame_indices,
                                                   std::uint64_t hash) const {
  auto [first, last] = stack_index_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    auto existing = stack(FrameStackId{it->second});
    if (std::equal(existing.begin(), existing.end(), frame_indices.begin(), frame_indices.end()))
      return FrameStackId{it->second};
  }
  return std::nullopt;
}

std::optional<FrameStackId> FrameTable::find_stack(
    std::span<const std::uint32_t> frame_indices) const {
  return find_stack(frame_indices, hash_stack(frame_indices));
}

FrameStackId FrameTable::intern_stack(std::span<const std::uint32_t> frame_indices) {
  const std::uint64_t h = hash_stack(frame_indices);
  if (const std::optional<FrameStackId> known = find_stack(frame_indices, h))
    return *known;
  auto id = static_cast<std::uint32_t>(stack_offsets_.size() - 1);
  stack_items_.insert(stack_items_.end(), frame_indices.begin(), frame_indices.end());
  stack_offsets_.push_back(static_cast<std::uint32_t>(stack_items_.size()));
  stack_index_.emplace(h, id);
  return FrameStackId{id};
}

std::span<const std::uint32_t> FrameTable::stack(FrameStackId id) const {
  if (id.value >= stack_count())
    return {};
  return std::span<const std::uint32_t>(stack_items_)
      .subspan(stack_offsets_[id.value], stack_offsets_[id.value + 1] - stack_offsets_[id.value]);
}

std::vector<Frame> FrameTable::stack_frames(FrameStackId id) const {
  std::vector<Frame> out;
  for (std::uint32_t i : stack(id))
    out.push_back(frames_[i]);
  return out;
}

// ---- enums ------------------------------------------------------------------------------------

std::size_t Snapshot::device_count() const {
  std::size_t n = device_traces.size();
  for (const Segment& s : segments)
    n = std::max(n, static_cast<std::size_t>(s.device) + 1);
  return n;
}

std::size_t Snapshot::trace_size(std::size_t device) const {
  if (const EventSpool* packed = spool(device))
    return packed->size();
  return device < device_traces.size() ? device_traces[device].size() : 0;
}

TraceBlocks Snapshot::trace_blocks(std::size_t device) const {
  if (const EventSpool* packed = spool(device))
    return TraceBlocks(*packed);
  if (device < device_traces.size())
    return TraceBlocks(device_traces[device]);
  return TraceBlocks();
}

const EventSpool* Snapshot::spool(std::size_t device) const {
  return device < device_spools.size() && !device_spools[device].empty() ? &device_spools[device]
                                                                         : nullptr;
}

std::size_t Snapshot::busiest_device() const {
  std::size_t best = 0;
  for (std::size_t d = 1; d < device_traces.size(); ++d) {
    if (trace_size(d) > trace_size(best))
      best = d;
  }
  if (best < device_traces.size() && trace_size(best) > 0)
    return best;
  std::vector<std::size_t> segment_counts(device_count(), 0);
  for (const Segment& segment : segments)
    ++segment_counts[static_cast<std::size_t>(segment.device)];
  return static_cast<std::size_t>(std::max_element(segment_counts.begin(), segment_counts.end()) -
                                  segment_counts.begin());
}

std::size_t Snapshot::trace_entry_count() const {
  std::size_t n = 0;
  for (std::size_t d = 0; d < device_traces.size(); ++d)
    n += trace_size(d);
  return n;
}

std::string_view Snapshot::compile_context(std::size_t device, std::size_t index) const {
  if (device >= device_entry_texts.size() || index >= device_entry_texts[device].size())
    return {};
  return entry_texts[device_entry_texts[device][index].compile_context];
}

std::string_view Snapshot::user_metadata(std::size_t device, std::size_t index) const {
  if (device >= device_entry_texts.size() || index >= device_entry_texts[device].size())
    return {};
  return entry_texts[device_entry_texts[device][index].user_metadata];
}

std::vector<std::vector<std::pair<std::string, std::string>>> Snapshot::entry_text_strings() const {
  std::vector<std::vector<std::pair<std::string, std::string>>> out(device_entry_texts.size());
  for (std::size_t d = 0; d < device_entry_texts.size(); ++d) {
    for (std::size_t i = 0; i < device_entry_texts[d].size(); ++i)
      out[d].emplace_back(compile_context(d, i), user_metadata(d, i));
  }
  // A device whose entries carry no text at all equals one without the parallel vector.
  while (!out.empty() && std::all_of(out.back().begin(), out.back().end(), [](const auto& p) {
    return p.first.empty() && p.second.empty();
  }))
    out.pop_back();
  return out;
}

// ---- which release wrote it -------------------------------------------------------------------

alloc::RecordedAllocatorConfig recorded_allocator_config(const Snapshot& snapshot) {
  return alloc::read_allocator_settings(
      snapshot.allocator_settings_recorded ? &snapshot.allocator_settings : nullptr,
      snapshot.torch_version.newest);
}

void override_torch_version(Snapshot& snapshot, TorchVersion version) {
  const std::string guessed = snapshot.torch_version.describe();
  snapshot.torch_version =
      TorchVersionGuess{version, version, "--torch-version; the format suggested " + guessed, true};
}

alloc::ProfileChoice profile_choice(const TorchVersionGuess& guess) {
  alloc::ProfileChoice out;
  out.version = guess.profile();
  out.range = guess.range();
  out.evidence = guess.evidence;
  out.source = alloc::ProfileSource::snapshot_format;
  if (guess.from_override) {
    out.source = alloc::ProfileSource::user;
    constexpr std::string_view kPrefix = "--torch-version; ";
    if (out.evidence.starts_with(kPrefix))
      out.evidence.erase(0, kPrefix.size());
  }
  return out;
}

std::string TorchVersionGuess::range() const {
  if (oldest == newest)
    return oldest.to_string();
  return oldest.to_string() + "-" + newest.to_string();
}

std::string TorchVersionGuess::describe() const {
  return range() + " (" + evidence + ")";
}

TorchVersionGuess guess_torch_version(const FormatFeatures& f) {
  auto guess = [](int oldest, int newest, std::string evidence) {
    return TorchVersionGuess{TorchVersion{2, oldest}, TorchVersion{2, newest}, std::move(evidence),
                             false};
  };
  const bool traced = f.trace_entries > 0;
  if (f.block_history)
    return guess(0, 0, "blocks carry 'history' and no 'address'");
  if (f.segments_list_only)
    return guess(1, 11, "a bare segments list (torch.cuda.memory_snapshot()) with block addresses");
  if (!f.allocator_settings) {
    if (!traced)
      return guess(1, 2, "no allocator_settings, no trace entries to tell 2.1 from 2.2");
    if (f.entries_with_time > 0)
      return guess(2, 2, "no allocator_settings, trace entries with time_us");
    return guess(1, 1, "no allocator_settings, trace entries without time_us");
  }
  if (!f.external_annotations)
    return guess(3, 4, "allocator_settings without external_annotations");
  if (f.settings_graph_capture_key) {
    if (!traced)
      return guess(9, 11, "allocator_settings with graph_capture_record_stream_reuse, no trace");
    if (f.entries_with_user_metadata > 0)
      return guess(10, 11, "graph_capture_record_stream_reuse, trace entries with user_metadata");
    return guess(9, 9, "graph_capture_record_stream_reuse, trace entries without user_metadata");
  }
  if (!traced)
    return guess(5, 8,
                 "external_annotations, allocator_settings without "
                 "graph_capture_record_stream_reuse, no trace");
  if (f.entries_with_compile_context > 0)
    return guess(8, 8,
                 "trace entries with compile_context, allocator_settings without "
                 "graph_capture_record_stream_reuse");
  return guess(5, 7, "external_annotations, trace entries without compile_context");
}

}  // namespace fragscope::snapshot
