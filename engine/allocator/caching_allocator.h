#pragma once
// A byte-exact model of PyTorch 2.11's native CUDA caching allocator (torch-allocator-spec
// §1-§7, §9): the same rounding, best-fit search, splitting, merging, release order, garbage
// collection, memory limit, expandable segments, record_stream handling, OOM retry sequence and
// statistics, decision for decision.
//
// Glossary (PyTorch's words, used throughout):
// - segment: one range of device memory the allocator got from the device: a cudaMalloc'd
//   range, or for expandable segments one virtual-address reservation whose pages are mapped on
//   demand. Segments are only ever returned whole (cudaFree) or, expandable, page by page.
// - block: a contiguous byte range inside a segment. A segment is tiled by a chain of blocks in
//   address order (prev/next); a block is allocated (handed to the program), pending free
//   (freed by the program but still used by another stream), or free (cached).
// - split: handing out the low part of a free block and keeping the rest as a new free block;
//   a block "is split" when its segment has other blocks. Free blocks of split segments are what
//   memory_summary calls "Non-releasable" (stat inactive_split).
// - pool: the free blocks that can serve a request. There are two, small (blocks <= 1 MiB, from
//   2 MiB segments) and large; each is ordered by (stream, size, address) for best fit.
// - stream: the CUDA stream a block was allocated on. A free block is only reused on the same
//   stream, so streams never share cached memory.
// - event: when a block used by other streams (record_stream) is freed, one CUDA event per such
//   stream is recorded; the block becomes free only when all of them completed (here:
//   mark_events_ready, or a synchronization in empty_cache / the OOM path).
// - oversize: blocks of at least max_split_size bytes; never split, reused only by requests less
//   than max_non_split_rounding_size smaller.
//
// - private pool: a CUDA graph's or torch.cuda.MemPool's own small and large pools (§13).
//   While a capture (beginAllocateToPool) is underway, requests on the streams it covers go to
//   its pool; the pool keeps its memory until its use_count drops to 0 (graph reset, MemPool
//   deleted), after which empty_cache returns its unsplit segments.
//
// Not modelled: the cudaMallocAsync backend (§12), free-memory callbacks (IPC), runtime changes
// of the configuration, and graph_capture_record_stream_reuse (which needs the captured graph's
// topology: frees of record_stream'ed blocks are deferred to the end of the capture instead).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/allocator/config.h"
#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/private_pools.h"
#include "engine/allocator/profile.h"
#include "engine/allocator/sizes.h"
#include "engine/allocator/stats.h"
#include "engine/core/block_state.h"
#include "engine/core/error.h"
#include "engine/core/mempool_id.h"
#include "engine/core/strong_id.h"
#include "engine/core/units.h"

namespace fragscope::alloc {

// free()/record_stream()/mark_events_ready() of an address that is not a live allocation
// (PyTorch: "invalid device pointer: <ptr>").
class InvalidPointerError : public InputError {
 public:
  using InputError::InputError;
};

// Misuse of private pools (beginAllocateToPool twice for one pool, releasing a released pool, ...).
class PoolError : public InputError {
 public:
  using InputError::InputError;
};

// Everything PyTorch knew when it raised torch.OutOfMemoryError (spec §6).
struct OutOfMemory {
  Bytes requested = 0;           // unrounded request n
  Bytes rounded_size = 0;        // round_size(n); the trace's oom entry has this size
  Bytes segment_size = 0;        // allocation_size: what "Tried to allocate" prints
  Bytes allocated = 0;           // allocated_bytes.all.current at the failure
  Bytes reserved = 0;            // reserved_bytes.all.current at the failure
  std::optional<Bytes> allowed;  // per-process limit, when one is set
  Bytes device_total = 0;
  Bytes device_free = 0;
  StreamId stream{};
  std::string message;  // PyTorch's exact exception text
};

struct MallocResult {
  std::uint64_t address = 0;       // block address when ok()
  std::optional<OutOfMemory> oom;  // set when the allocation failed
  bool ok() const { return !oom.has_value(); }
};

using fragscope::BlockState;  // engine/core/block_state.h

struct BlockInfo {
  std::uint64_t address = 0;
  Bytes size = 0;
  Bytes requested_size = 0;  // stale for inactive blocks, exactly as PyTorch reports it (§2.1)
  BlockState state = BlockState::inactive;
};

// One segment as torch.cuda.memory._snapshot() lists it: a cudaMalloc'd segment, or one
// contiguous mapped range of an expandable segment. Sorted by address.
struct SegmentInfo {
  std::uint64_t address = 0;
  Bytes total_size = 0;
  Bytes allocated_size = 0;
  Bytes active_size = 0;
  Bytes requested_size = 0;  // over active blocks only
  StreamId stream{};
  PoolKind pool = PoolKind::large;
  MempoolId pool_id;  // segment_pool_id: (0,0) for the default pools
  bool is_expandable = false;
  std::vector<BlockInfo> blocks;
};

// A segment as it stood before the first request of a trace that starts mid-run (the state
// replay reconstructs from the final snapshot), with its blocks in address order, tiling it.
// Active blocks carry the tensor a request stream refers to them by.
struct SeedBlock {
  std::uint64_t address = 0;
  Bytes size = 0;
  Bytes requested_size = 0;
  BlockState state = BlockState::inactive;
  TensorId tensor{};
};
struct SeedSegment {
  std::uint64_t address = 0;
  Bytes size = 0;  // cudaMalloc'd bytes, or the mapped range of an expandable segment
  StreamId stream{};
  PoolKind pool = PoolKind::large;
  bool expandable = false;
  std::vector<SeedBlock> blocks;
  MempoolId pool_id{};  // a private pool's segment (created with one user if new); (0,0): default
};

class CachingAllocator {
 public:
  // `device` and `sink` must outlive the allocator; `sink` may be null. Applies the config's
  // per_process_memory_fraction (allowed = floor(f x device.total_memory()) when f < 1).
  CachingAllocator(AllocatorConfig config, Device& device, EventSink* sink = nullptr);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // caching_allocator_alloc(bytes, stream). bytes == 0 returns address 0 and records nothing,
  // like PyTorch. Sizes >= 1 EiB fail with "Tried to allocate more than 1EB memory." and no
  // stats change.
  MallocResult malloc(Bytes bytes, StreamId stream);
  // The same for a loop of many requests: the address (0 for 0 bytes), or 0 with `oom` set when
  // the request fails. `oom` must be empty; the caller keeps one for every request (building a
  // MallocResult zeroes its whole OutOfMemory storage each time).
  std::uint64_t malloc(Bytes bytes, StreamId stream, std::optional<OutOfMemory>& oom);
  // caching_allocator_delete. Address 0 is a no-op; an unknown address throws
  // InvalidPointerError.
  void free(std::uint64_t address);
  // tensor.record_stream(stream) on a live allocation; the allocation stream itself is ignored.
  void record_stream(std::uint64_t address, StreamId stream);
  // The events recorded when the pending-free block at `address` was freed have completed; the
  // block is freed at the next malloc (process_events), in per-stream FIFO order like PyTorch.
  void mark_events_ready(std::uint64_t address);
  // Adopts segments that existed before the first malloc (a trace recorded mid-run): each is
  // obtained from the device like a new one (mapped, for expandable segments) and carved into
  // its blocks by the allocator's own split and free paths, without emitting events. A
  // pending-free block waits for an event of a stream nothing else uses (mark_events_ready
  // completes it). Returns the address the model gave each seeded block, in order (the seed's
  // own unless the device placed the segment elsewhere). Peak and accumulated stats are reset
  // afterwards, so they describe what follows. InputError when a seed does not tile its
  // segment or the device cannot hold it.
  std::vector<std::uint64_t> seed(const std::vector<SeedSegment>& segments);
  // torch.cuda.empty_cache() (release_cached_blocks): synchronizes all events, then returns every
  // unsplit cached segment and every fully free expandable page to the device.
  void empty_cache();
  // empty_cache of one private pool (MemPool's destructor, torch.cuda.empty_cache for a pool):
  // only when that pool is freeable, its pending frees are synchronized and its unsplit
  // segments returned.
  void empty_cache(MempoolId pool);

  // --- private pools (spec §13) ---
  // createOrIncrefPool: a new pool with use_count 1 (torch.cuda.MemPool, graph_pool_handle), or
  // one more user of an existing one.
  void create_pool(MempoolId pool, PoolOptions options = {});
  // beginAllocateToPool: until end_allocate_to_pool, requests on `stream` (a CUDA graph capture)
  // or on every stream (nullopt: use_mem_pool's current-thread filter) allocate from `pool`,
  // creating it if needed; adds a user (use_count + 1).
  void begin_allocate_to_pool(MempoolId pool, std::optional<StreamId> stream);
  void end_allocate_to_pool(MempoolId pool);
  // releasePool: one user fewer; at 0 the pool becomes freeable.
  void release_pool(MempoolId pool);
  // use_count of a pool (0 once freeable), nullopt when there is no such pool (or it was deleted
  // after all its memory was returned).
  std::optional<int> pool_use_count(MempoolId pool) const;
  bool capture_underway() const;

  // The rules of another release than 2.11 (torch-allocator-spec §14): its memory-fraction
  // semantics and OOM text. Call before the first request.
  void set_profile(const AllocatorProfile& profile);
  const AllocatorProfile& profile() const;

  // set_per_process_memory_fraction as a byte limit; nullopt removes it (fraction 1.0).
  void set_allowed_memory(std::optional<Bytes> bytes);
  std::optional<Bytes> allowed_memory() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  // Sets every counter to `stats`: the peaks and totals an allocator-state keyframe recorded,
  // after seed() rebuilt its blocks (whose current values they must agree with).
  void restore_stats(const DeviceStats& stats);

  const DeviceStats& stats() const;
  const AllocatorConfig& config() const;
  // Bytes obtained from the device (cudaMalloc'd segments + mapped pages): PyTorch's
  // total_allocated_memory, which the memory limit and GC compare against.
  Bytes total_allocated_memory() const;
  // The most total_allocated_memory() at any malloc that found no cached block, where
  // garbage_collection_threshold is checked (whether the collector is enabled or not). The
  // collector releases nothing while total_allocated_memory() <= threshold x allowed there, so
  // a run whose gc_check_peak stays within that limit makes the same decisions with the
  // threshold as without it.
  Bytes gc_check_peak() const;

  std::vector<SegmentInfo> snapshot() const;
  // State of the block that starts at `address`, if it is an active (allocated or pending-free)
  // block; nullopt for anything else.
  std::optional<BlockState> block_state(std::uint64_t address) const;
  // Largest cached (free, mapped) block, over all streams and pools (private ones too), or of
  // one stream.
  Bytes largest_free_block() const;
  Bytes largest_free_block(StreamId stream) const;
  // Whether a request of `bytes` on `stream` would be served from memory `pool` has cached
  // (get_free_block would find a block) when it allocates from that pool: how a replay tells
  // which pool a recorded allocation that opened a new segment could not have used.
  // Returns the address of the block it would take.
  std::optional<std::uint64_t> cached_block(MempoolId pool, Bytes bytes, StreamId stream) const;
  // The private pools that exist, by id.
  std::vector<MempoolId> private_pools() const;
  // Size and address of every cached block of one default pool, in best-fit order (stream,
  // size, address).
  std::vector<BlockInfo> free_blocks(PoolKind pool) const;

  // The invariant checker: blocks tile their segments, neighbours agree, pool sets hold exactly
  // the free mapped blocks, the address index holds exactly the active blocks, and every stat
  // that can be recounted from the blocks (current values) agrees. On failure returns false and
  // says why.
  bool is_valid(std::string* why = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fragscope::alloc
