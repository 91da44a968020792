#include "engine/analysis/post_mortem.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/allocator/sizes.h"
#include "engine/allocator/summary.h"
#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

Bytes saturating_sub(Bytes a, Bytes b) {
  return a > b ? a - b : 0;
}

// get_free_block's oversize rules (spec §3.1 step 4): would this block be refused?
bool refused_by_oversize_rules(Bytes block, Bytes rounded, const alloc::AllocatorConfig& config) {
  const Bytes limit = config.max_split_size;
  if (rounded < limit && block >= limit)
    return true;
  return rounded >= limit && block >= rounded + config.max_non_split_rounding_size;
}

}  // namespace

std::string_view to_string(OomCause cause) {
  switch (cause) {
    case OomCause::capacity:
      return "capacity";
    case OomCause::fragmentation:
      return "fragmentation";
    case OomCause::cache_policy:
      return "cache_policy";
    case OomCause::other_stream:
      return "other_stream";
  }
  return "capacity";
}

std::string OomPostMortem::pytorch_figures() const {
  std::string text = "Tried to allocate " + alloc::format_size(segment_size) + ". ";
  if (limited)
    text += alloc::format_size(capacity) + " allowed; ";
  text += "Of the allocated memory " + alloc::format_size(allocated) +
          " is allocated by PyTorch, and " + alloc::format_size(reserved_unallocated) +
          " is reserved by PyTorch but unallocated.";
  return text;
}

OomPostMortem diagnose(const OomSituation& s, const alloc::AllocatorConfig& config) {
  OomPostMortem pm;
  pm.requested = s.requested;
  pm.rounded = s.rounded;
  pm.segment_size = alloc::allocation_size(s.rounded, config);
  pm.stream = s.stream;
  pm.capacity = s.capacity;
  pm.limited = s.limited;
  pm.allocated = s.memory.allocated;
  pm.reserved = s.memory.reserved;
  pm.reserved_unallocated = saturating_sub(s.memory.reserved, s.memory.allocated);
  pm.headroom = saturating_sub(s.capacity, s.memory.reserved);
  if (s.device_free)
    pm.headroom = std::min(pm.headroom, *s.device_free);
  pm.pending_free = saturating_sub(s.memory.active, s.memory.allocated);
  pm.free_by_pool_stream = summarize_free(s.free_blocks);

  const alloc::PoolKind pool = alloc::pool_for(s.rounded);
  Bytes same_stream_free = 0;     // both pools of the request's stream
  Bytes other_streams_free = 0;   // every pool of the other streams
  std::optional<Bytes> best_fit;  // smallest block of the request's stream and pool that fits
  for (const FreeBlock& block : s.free_blocks) {
    pm.cached_free += block.size;
    pm.largest_free = std::max(pm.largest_free, block.size);
    if (block.in_split_segment)
      pm.stranded_in_split += block.size;
    if (block.stream == s.stream) {
      same_stream_free += block.size;
      if (block.pool == pool) {
        pm.largest_usable = std::max(pm.largest_usable, block.size);
        if (block.size >= s.rounded && (!best_fit || block.size < *best_fit))
          best_fit = block.size;
      }
    } else {
      other_streams_free += block.size;
    }
  }

  const std::string request = alloc::format_size(s.rounded);
  auto say = [&pm](std::string sentence) { pm.evidence.push_back(std::move(sentence)); };

  if (s.memory.allocated + s.rounded > s.capacity) {
    pm.cause = OomCause::capacity;
    say("allocated " + alloc::format_size(s.memory.allocated) + " + request " + request + " = " +
        alloc::format_size(s.memory.allocated + s.rounded) + " exceeds the capacity of " +
        alloc::format_size(s.capacity) + ": even perfect packing would not fit");
    return pm;
  }
  say("allocated " + alloc::format_size(s.memory.allocated) + " + request " + request +
      " fits in " + alloc::format_size(s.capacity) + ": perfect packing would have succeeded");

  if (best_fit && refused_by_oversize_rules(*best_fit, s.rounded, config)) {
    pm.cause = OomCause::cache_policy;
    say("a cached " + alloc::format_size(*best_fit) + " block on stream " +
        std::to_string(s.stream.value) + " was large enough but the oversize rules refused it " +
        "(max_split_size " +
        (config.max_split_size == alloc::kUnlimited ? std::string("unlimited")
                                                    : alloc::format_size(config.max_split_size)) +
        ", max_non_split_rounding_size " + alloc::format_size(config.max_non_split_rounding_size) +
        ")");
    return pm;
  }
  if (pm.headroom >= s.rounded && pm.headroom < pm.segment_size) {
    pm.cause = OomCause::cache_policy;
    say("the device still had " + alloc::format_size(pm.headroom) + " for the " + request +
        " request, but the segment rounding asked for " + alloc::format_size(pm.segment_size));
    return pm;
  }
  if (same_stream_free + pm.headroom >= s.rounded) {
    pm.cause = OomCause::fragmentation;
    say("stream " + std::to_string(s.stream.value) + " had " +
        alloc::format_size(same_stream_free) + " cached free" +
        (pm.headroom > 0 ? " plus " + alloc::format_size(pm.headroom) + " on the device" : "") +
        ", but its largest usable block was " + alloc::format_size(pm.largest_usable) + " for a " +
        request + " request");
    say(alloc::format_size(pm.stranded_in_split) +
        " is stranded in split segments, which empty_cache cannot return");
    return pm;
  }
  if (same_stream_free + pm.headroom + other_streams_free + pm.pending_free >= s.rounded) {
    pm.cause = OomCause::other_stream;
    say("stream " + std::to_string(s.stream.value) + " had only " +
        alloc::format_size(same_stream_free + pm.headroom) + " within reach; other streams held " +
        alloc::format_size(other_streams_free) + " cached free and " +
        alloc::format_size(pm.pending_free) + " waited for other streams' events");
    return pm;
  }
  // The room exists only as bytes the cache cannot reach at all (accounting of another pool).
  pm.cause = OomCause::fragmentation;
  say("the cache held " + alloc::format_size(pm.cached_free) + " free, none of it usable for a " +
      request + " request on stream " + std::to_string(s.stream.value));
  return pm;
}

std::vector<OomPostMortem> trace_post_mortems(std::span<const TraceEvent> events,
                                              snapshot::SegmentState initial,
                                              const alloc::AllocatorConfig& config,
                                              std::optional<Bytes> limit) {
  std::vector<OomPostMortem> result;
  snapshot::SegmentState state = std::move(initial);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& event = events[i];
    if (event.action == TraceAction::oom) {
      OomSituation s;
      s.rounded = event.size;
      s.stream = event.stream;
      s.memory = sample_of(state);
      s.device_free = event.addr;
      const Bytes device_capacity = s.memory.reserved + event.addr;
      s.capacity = limit ? std::min(*limit, device_capacity) : device_capacity;
      s.limited = limit.has_value();
      s.free_blocks = free_blocks(state);
      OomPostMortem pm = diagnose(s, config);
      pm.event_index = i;
      result.push_back(std::move(pm));
      continue;
    }
    try {
      state.apply(event);
    } catch (const InputError& error) {
      throw InputError("event " + std::to_string(i) + ": " + error.what());
    }
  }
  return result;
}

nlohmann::json to_json(const OomPostMortem& pm) {
  nlohmann::json free = nlohmann::json::array();
  for (const auto& space : pm.free_by_pool_stream)
    free.push_back(to_json(space));
  return {{"event_index", pm.event_index},
          {"requested", pm.requested},
          {"rounded", pm.rounded},
          {"segment_size", pm.segment_size},
          {"stream", pm.stream.value},
          {"capacity", pm.capacity},
          {"limited", pm.limited},
          {"allocated", pm.allocated},
          {"reserved", pm.reserved},
          {"reserved_unallocated", pm.reserved_unallocated},
          {"headroom", pm.headroom},
          {"pending_free", pm.pending_free},
          {"cached_free", pm.cached_free},
          {"largest_free", pm.largest_free},
          {"largest_usable", pm.largest_usable},
          {"stranded_in_split", pm.stranded_in_split},
          {"free_by_pool_stream", std::move(free)},
          {"cause", to_string(pm.cause)},
          {"evidence", pm.evidence},
          {"pytorch_figures", pm.pytorch_figures()}};
}

}  // namespace fragscope::analysis
