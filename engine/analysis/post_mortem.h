#pragma once
// OOM post-mortem: why an allocation failed although memory looked free, with the evidence.
//
// PyTorch only raises OutOfMemoryError after its retry sequence (torch-allocator-spec §3 step 5):
// it has already returned every whole free segment to the device, so what the cache still holds
// is free blocks inside split segments (stranded: empty_cache cannot return them), free blocks of
// other streams or of the other pool, and freed blocks waiting for other streams' events. The
// classification weighs those against the request:
// - capacity: allocated + request > capacity. Even perfect packing of the live allocations
//   leaves no room; only using less memory helps.
// - cache_policy: a cached block on the request's stream was big enough but the oversize rules
//   refused it (max_split_size / max_non_split_rounding_size), or the device had room for the
//   request but not for the larger segment the rounding rules ask for (large_segment_size,
//   2 MiB rounding).
// - fragmentation: the request's stream holds enough cached free bytes (counting the device's
//   remaining room) but no block is large enough, and the split segments they sit in cannot be
//   returned.
// - other_stream: the bytes exist only on other streams, or in blocks still waiting for other
//   streams' events (record_stream); streams never share cached memory.
// - private_pool: the bytes are cached in private pools (CUDA graphs, MemPool): stranded there,
//   since only allocations routed to that pool can use them and empty_cache returns them only
//   once the graph or pool is deleted.
#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/allocator/config.h"
#include "engine/analysis/metrics.h"
#include "engine/core/mempool_id.h"
#include "engine/core/trace.h"
#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::analysis {

enum class OomCause : std::uint8_t {
  capacity,
  fragmentation,
  cache_policy,
  other_stream,
  private_pool
};
std::string_view to_string(OomCause cause);

// What the allocator held when the allocation failed, from a trace or from the model.
struct OomSituation {
  Bytes requested = 0;  // unrounded request; 0 when unknown (a trace records the rounded size)
  Bytes rounded = 0;    // round_size(request)
  StreamId stream{};
  Bytes capacity = 0;    // bytes the allocator may hold: the per-process limit, else the device's
  bool limited = false;  // capacity is a per-process limit ("... allowed")
  std::optional<Bytes> device_free;    // cudaMemGetInfo free at the failure, when known
  MemorySample memory;                 // allocated, reserved, active ... at the failure
  std::vector<FreeBlock> free_blocks;  // the cache's free blocks
};

struct OomPostMortem {
  std::size_t event_index = 0;  // trace event (trace post-mortems) or request index (simulated)
  Bytes requested = 0;
  Bytes rounded = 0;
  Bytes segment_size = 0;  // what PyTorch would have cudaMalloc'd ("Tried to allocate")
  StreamId stream{};
  Bytes capacity = 0;
  bool limited = false;
  Bytes allocated = 0;
  Bytes reserved = 0;
  Bytes reserved_unallocated = 0;  // reserved - allocated, as the OOM text prints it
  Bytes headroom = 0;              // more the device would still have given
  Bytes pending_free = 0;          // freed blocks waiting for other streams' events
  Bytes cached_free = 0;           // all free cached blocks
  Bytes largest_free = 0;          // any stream or pool
  Bytes largest_usable = 0;        // on the request's stream and pool
  Bytes stranded_in_split = 0;     // free bytes in split segments
  // Free bytes cached in private pools, which a request to the default pools cannot use.
  Bytes stranded_in_private_pools = 0;
  std::vector<std::pair<MempoolId, Bytes>> free_by_private_pool;  // in pool id order
  std::vector<FreeSpace> free_by_pool_stream;
  OomCause cause = OomCause::capacity;
  std::vector<std::string> evidence;  // sentences with the figures that decided the cause

  // PyTorch's own figures as its message prints them: "Tried to allocate <segment_size>",
  // "<capacity> allowed", "<allocated> is allocated by PyTorch, and <reserved_unallocated> is
  // reserved by PyTorch but unallocated".
  std::string pytorch_figures() const;
};

// Classifies one failure. `config` supplies the rounding and oversize rules.
OomPostMortem diagnose(const OomSituation& situation, const alloc::AllocatorConfig& config);

// The private pool of each segment, by address: the snapshot's segment_pool_id (only the
// final segments carry one). A segment at that address with another size, or not listed, is
// taken as the default pools'.
struct PrivateSegment {
  Bytes size = 0;
  MempoolId pool;
};
using PrivateSegments = std::map<std::uint64_t, PrivateSegment>;
PrivateSegments private_segments(const snapshot::Snapshot& snapshot, int device);
// From an imported run's summary["segment_pools"] ([address, size, first, second] entries).
PrivateSegments private_segments_from_json(const nlohmann::json& segment_pools);

// One post-mortem per oom entry of a trace, from the layout just before it. `capacity` is the
// per-process limit when one was set; otherwise the capacity is what the allocator held plus
// the device's free memory the oom entry recorded.
std::vector<OomPostMortem> trace_post_mortems(std::span<const TraceEvent> events,
                                              snapshot::SegmentState initial,
                                              const alloc::AllocatorConfig& config,
                                              std::optional<Bytes> limit = std::nullopt,
                                              const PrivateSegments* pools = nullptr);
// The same for a trace in either form (a spooled one read forward, never unpacked).
std::vector<OomPostMortem> trace_post_mortems(const snapshot::TraceBlocks& events,
                                              snapshot::SegmentState initial,
                                              const alloc::AllocatorConfig& config,
                                              std::optional<Bytes> limit = std::nullopt,
                                              const PrivateSegments* pools = nullptr);

nlohmann::json to_json(const OomPostMortem& post_mortem);

}  // namespace fragscope::analysis
