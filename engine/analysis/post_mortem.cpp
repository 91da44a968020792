#include "engine/analysis/post_mortem.h"

#include <algorithm>
#include <limits>
#include <map>
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
    case OomCause::private_pool:
      return "private_pool";
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
  std::map<MempoolId, Bytes> private_free;
  for (const FreeBlock& block : s.free_blocks) {
    pm.cached_free += block.size;
    pm.largest_free = std::max(pm.largest_free, block.size);
    if (!block.pool_id.is_default()) {
      private_free[block.pool_id] += block.size;
      pm.stranded_in_private_pools += block.size;
      continue;  // a default-pool request never sees a private pool's blocks
    }
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

  pm.free_by_private_pool.assign(private_free.begin(), private_free.end());

  const std::string request = alloc::format_size(s.rounded);
  auto say = [&pm](std::string sentence) { pm.evidence.push_back(std::move(sentence)); };
  // Whatever the cause, memory cached in graph pools is stranded for this request.
  auto say_private = [&] {
    if (pm.stranded_in_private_pools == 0)
      return;
    std::string pools;
    for (const auto& [id, bytes] : pm.free_by_private_pool)
      pools += (pools.empty() ? "" : ", ") + to_string(id) + " " + alloc::format_size(bytes);
    say(alloc::format_size(pm.stranded_in_private_pools) +
        " is cached free in private pools (CUDA graphs, MemPool: " + pools +
        "): stranded there, only allocations to those pools can use it, and empty_cache returns "
        "it only after the graph or pool is deleted");
  };

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
    say_private();
    return pm;
  }
  if (pm.headroom >= s.rounded && pm.headroom < pm.segment_size) {
    pm.cause = OomCause::cache_policy;
    say("the device still had " + alloc::format_size(pm.headroom) + " for the " + request +
        " request, but the segment rounding asked for " + alloc::format_size(pm.segment_size));
    say_private();
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
    say_private();
    return pm;
  }
  if (same_stream_free + pm.headroom + other_streams_free + pm.pending_free >= s.rounded) {
    pm.cause = OomCause::other_stream;
    say("stream " + std::to_string(s.stream.value) + " had only " +
        alloc::format_size(same_stream_free + pm.headroom) + " within reach; other streams held " +
        alloc::format_size(other_streams_free) + " cached free and " +
        alloc::format_size(pm.pending_free) + " waited for other streams' events");
    say_private();
    return pm;
  }
  if (same_stream_free + pm.headroom + other_streams_free + pm.pending_free +
          pm.stranded_in_private_pools >=
      s.rounded) {
    pm.cause = OomCause::private_pool;
    say("stream " + std::to_string(s.stream.value) + " had only " +
        alloc::format_size(same_stream_free + pm.headroom) +
        " within reach in the default pools; the rest of the room was cached in private pools");
    say_private();
    return pm;
  }
  // The room exists only as bytes the cache cannot reach at all (accounting of another pool).
  pm.cause = OomCause::fragmentation;
  say("the cache held " + alloc::format_size(pm.cached_free) + " free, none of it usable for a " +
      request + " request on stream " + std::to_string(s.stream.value));
  return pm;
}

PrivateSegments private_segments(const snapshot::Snapshot& snapshot, int device) {
  PrivateSegments out;
  for (const snapshot::Segment& segment : snapshot.segments) {
    if (segment.device == device && (segment.pool_id.first != 0 || segment.pool_id.second != 0))
      out[segment.address] = PrivateSegment{
          segment.total_size, MempoolId{static_cast<std::uint64_t>(segment.pool_id.first),
                                        static_cast<std::uint64_t>(segment.pool_id.second)}};
  }
  return out;
}

PrivateSegments private_segments_from_json(const nlohmann::json& segment_pools) {
  PrivateSegments out;
  if (!segment_pools.is_array())
    return out;
  for (const nlohmann::json& entry : segment_pools) {
    if (!entry.is_array() || entry.size() != 4 ||
        !std::all_of(entry.begin(), entry.end(),
                     [](const nlohmann::json& v) { return v.is_number_unsigned(); }))
      continue;  // written by the import: anything else is not a pool entry
    out[entry[0].get<std::uint64_t>()] =
        PrivateSegment{entry[1].get<Bytes>(),
                       MempoolId{entry[2].get<std::uint64_t>(), entry[3].get<std::uint64_t>()}};
  }
  return out;
}

namespace {

// Marks the free blocks that sit in a private pool's segment.
void assign_private_pools(std::vector<FreeBlock>& blocks, const snapshot::SegmentState& state,
                          const PrivateSegments& pools) {
  const auto& segments = state.segment_map();
  for (FreeBlock& block : blocks) {
    auto segment = segments.upper_bound(block.address);
    if (segment == segments.begin())
      continue;
    --segment;
    const auto pool = pools.find(segment->first);
    if (pool != pools.end() && pool->second.size == segment->second.size)
      block.pool_id = pool->second.pool;
  }
}

}  // namespace

std::vector<OomPostMortem> trace_post_mortems(std::span<const TraceEvent> events,
                                              snapshot::SegmentState initial,
                                              const alloc::AllocatorConfig& config,
                                              std::optional<Bytes> limit,
                                              const PrivateSegments* pools) {
  return trace_post_mortems(snapshot::TraceBlocks(events), std::move(initial), config, limit,
                            pools);
}

std::vector<OomPostMortem> trace_post_mortems(const snapshot::TraceBlocks& events,
                                              snapshot::SegmentState initial,
                                              const alloc::AllocatorConfig& config,
                                              std::optional<Bytes> limit,
                                              const PrivateSegments* pools) {
  std::vector<OomPostMortem> result;
  snapshot::SegmentState state = std::move(initial);
  events.for_each([&](const TraceEvent& event, std::size_t i) {
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
      if (pools && !pools->empty())
        assign_private_pools(s.free_blocks, state, *pools);
      OomPostMortem pm = diagnose(s, config);
      pm.event_index = i;
      result.push_back(std::move(pm));
      return;
    }
    try {
      state.apply(event);
    } catch (const InputError& error) {
      throw InputError("event " + std::to_string(i) + ": " + error.what());
    }
  });
  return result;
}

nlohmann::json to_json(const OomPostMortem& pm) {
  nlohmann::json free = nlohmann::json::array();
  for (const auto& space : pm.free_by_pool_stream)
    free.push_back(to_json(space));
  nlohmann::json private_pools = nlohmann::json::array();
  for (const auto& [id, bytes] : pm.free_by_private_pool)
    private_pools.push_back({{"pool", to_string(id)}, {"free", bytes}});
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
          {"stranded_in_private_pools", pm.stranded_in_private_pools},
          {"free_by_private_pool", private_pools},
          {"free_by_pool_stream", std::move(free)},
          {"cause", to_string(pm.cause)},
          {"evidence", pm.evidence},
          {"pytorch_figures", pm.pytorch_figures()}};
}

}  // namespace fragscope::analysis
