#include "engine/allocator/profile.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <optional>
#include <vector>

namespace fragscope::alloc {
namespace {

constexpr TorchVersion v(int minor) {
  return TorchVersion{2, minor};
}

// The keys of a PYTORCH_CUDA_ALLOC_CONF string and the roundup list, read loosely: the release's
// own parser (AllocatorConfig::parse) reports malformed strings.
struct ConfPair {
  std::string key;
  std::string value;
};

std::vector<ConfPair> pairs_of(std::string_view text) {
  std::vector<ConfPair> out;
  std::string current;
  int depth = 0;
  auto flush = [&] {
    const auto colon = current.find(':');
    if (!current.empty())
      out.push_back({current.substr(0, colon),
                     colon == std::string::npos ? std::string() : current.substr(colon + 1)});
    current.clear();
  };
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)))
      continue;  // every release drops spaces (2.0 splits on them, later lexers skip them)
    if (c == '[')
      ++depth;
    if (c == ']')
      --depth;
    if (c == ',' && depth == 0) {
      flush();
      continue;
    }
    current += c;
  }
  flush();
  return out;
}

std::optional<std::uint64_t> to_number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

bool known_to(const AllocatorProfile& p, std::string_view key) {
  if (key == "expandable_segments")
    return p.has_expandable_segments;
  if (key == "release_lock_on_cudamalloc")
    return p.has_release_lock_on_cudamalloc;
  if (key == "pinned_use_cuda_host_register" || key == "pinned_num_register_threads")
    return p.has_pinned_host_register;
  if (key == "max_non_split_rounding_mb")
    return p.has_max_non_split_rounding;
  if (key == "pinned_use_background_threads")
    return p.has_pinned_use_background_threads;
  if (key == "large_segment_size_mb")
    return p.has_large_segment_size;
  if (key == "graph_capture_record_stream_reuse")
    return p.has_graph_capture_record_stream_reuse;
  if (key == "pinned_reserve_segment_size_mb")
    return p.has_pinned_reserve_segment_size;
  if (key == "per_process_memory_fraction")
    return p.has_per_process_memory_fraction_key;
  return true;  // the rest: every release, or unknown to all (parse() says so)
}

// The interval a roundup list entry K (MiB) sets, as config.cpp's interval_index.
std::size_t interval_of(std::uint64_t megabytes) {
  return std::min(static_cast<std::size_t>(std::bit_width(megabytes) - 1), kRoundupIntervals - 1);
}

}  // namespace

AllocatorProfile allocator_profile(TorchVersion version) {
  AllocatorProfile p;
  p.version = std::clamp(version, kOldestTorch, kLatestTorch);
  const TorchVersion at = p.version;
  p.has_expandable_segments = at >= v(1);
  p.has_release_lock_on_cudamalloc = at >= v(2);
  p.has_pinned_host_register = at >= v(2);
  p.has_max_non_split_rounding = at >= v(6);
  p.has_pinned_use_background_threads = at >= v(6);
  p.has_large_segment_size = at >= v(9);
  p.has_graph_capture_record_stream_reuse = at >= v(9);
  p.has_pinned_reserve_segment_size = at >= v(9);
  p.has_per_process_memory_fraction_key = at >= v(9);
  p.unknown_key_as_option = at <= v(8);
  p.max_split_size_strictly_above_20 = at <= v(0);
  p.one_division_leaves_size_unrounded = at <= v(0);
  p.roundup_gt_overwrites_last = at >= v(1) && at <= v(8);
  p.fraction_one_keeps_limit = at <= v(10);
  p.oom_text = at <= v(0)   ? OomTextStyle::v2_0
               : at == v(1) ? OomTextStyle::v2_1
               : at <= v(6) ? OomTextStyle::v2_2
                            : OomTextStyle::current;
  return p;
}

AllocatorConfig parse_alloc_conf(std::string_view text, const AllocatorProfile& profile) {
  const std::vector<ConfPair> pairs = pairs_of(text);
  for (const ConfPair& pair : pairs) {
    if (known_to(profile, pair.key))
      continue;
    throw AllocatorConfigError(profile.unknown_key_as_option
                                   ? "Unrecognized CachingAllocator option: " + pair.key
                                   : "Unrecognized key '" + pair.key +
                                         "' in CUDA allocator config.");
  }
  AllocatorConfig config;
  try {
    config = AllocatorConfig::parse(text);
  } catch (const MalformedAllocatorConfig&) {
    throw;
  } catch (const AllocatorConfigError& error) {
    // A key no release knows: the older releases' message names it as an option.
    const std::string_view what = error.what();
    constexpr std::string_view kPrefix = "Unrecognized key '";
    if (!profile.unknown_key_as_option || !what.starts_with(kPrefix))
      throw;
    const std::string_view rest = what.substr(kPrefix.size());
    throw AllocatorConfigError("Unrecognized CachingAllocator option: " +
                               std::string(rest.substr(0, rest.find('\''))));
  }
  for (const ConfPair& pair : pairs) {
    if (pair.key == "max_split_size_mb" && profile.max_split_size_strictly_above_20) {
      if (const auto mb = to_number(pair.value); mb && *mb <= 20)
        throw AllocatorConfigError(
            "CachingAllocator option max_split_size_mb too small, must be > 20");
    }
    if (pair.key == "roundup_power2_divisions" && profile.roundup_gt_overwrites_last &&
        pair.value.starts_with('[')) {
      // Entries "K:v" and ">:v" of the list; `>` also overwrote the last K listed before it.
      std::size_t last_index = 0;
      std::string_view list(pair.value);
      list.remove_prefix(1);
      if (list.ends_with(']'))
        list.remove_suffix(1);
      while (!list.empty()) {
        const auto comma = list.find(',');
        const std::string_view entry = list.substr(0, comma);
        list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
        const auto colon = entry.find(':');
        if (colon == std::string_view::npos)
          continue;
        const auto value = to_number(entry.substr(colon + 1));
        if (entry.substr(0, colon) == ">") {
          if (value)
            config.roundup_power2_divisions[last_index] = *value;
        } else if (const auto megabytes = to_number(entry.substr(0, colon));
                   megabytes && *megabytes > 0) {
          last_index = interval_of(*megabytes);
        }
      }
    }
  }
  return config;
}

std::string oom_message(const OomMessageInputs& inputs, const AllocatorProfile& profile) {
  if (profile.oom_text == OomTextStyle::current)
    return oom_message(inputs);
  const std::string allowed_info =
      inputs.allowed ? format_size(*inputs.allowed) + " allowed; " : std::string();
  if (profile.oom_text == OomTextStyle::v2_0) {
    return "CUDA out of memory. Tried to allocate " + format_size(inputs.tried_to_allocate) +
           " (GPU " + std::to_string(inputs.device) + "; " + format_size(inputs.total_capacity) +
           " total capacity; " + format_size(inputs.allocated) + " already allocated; " +
           format_size(inputs.device_free) + " free; " + allowed_info +
           format_size(inputs.reserved) +
           " reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
           "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
           "and PYTORCH_CUDA_ALLOC_CONF";
  }
  const std::string process_info = process_memory_text(inputs);
  if (profile.oom_text == OomTextStyle::v2_1) {
    return "CUDA out of memory. Tried to allocate " + format_size(inputs.tried_to_allocate) +
           ". GPU " + std::to_string(inputs.device) + " has a total capacty of " +
           format_size(inputs.total_capacity) + " of which " + format_size(inputs.device_free) +
           " is free. " + process_info + allowed_info + "Of the allocated memory " +
           format_size(inputs.allocated) + " is allocated by PyTorch, and " +
           format_size(inputs.reserved - inputs.allocated) +
           " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
           "try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory "
           "Management and PYTORCH_CUDA_ALLOC_CONF";
  }
  const std::string current = oom_message(inputs);
  // 2.2 .. ≈2.6: the current text with the older documentation link.
  const std::string_view new_link =
      " (https://docs.pytorch.org/docs/stable/notes/"
      "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  const auto at = current.rfind(new_link);
  return current.substr(0, at) +
         " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
}

}  // namespace fragscope::alloc
