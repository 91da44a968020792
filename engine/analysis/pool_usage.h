#pragma once
// Memory per pool at one point of a run: the default pools and each private pool (CUDA graph,
// MemPool), for the segment map and the Summary page. A snapshot records segment_pool_id only
// for its final segments, so a segment counts as private when its address and size match one of
// those (PrivateSegments); every other segment is the default pools'.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/analysis/post_mortem.h"
#include "engine/core/mempool_id.h"
#include "engine/core/units.h"

namespace fragscope::analysis {

struct PoolSegment {
  std::uint64_t address = 0;
  Bytes size = 0;
  Bytes live = 0;  // allocated + waiting for stream events
};

struct PoolUsage {
  MempoolId pool;  // (0,0): the default pools
  std::size_t segments = 0;
  Bytes reserved = 0;
  Bytes live = 0;
  Bytes cached_free() const { return reserved - live; }
  friend bool operator==(const PoolUsage&, const PoolUsage&) = default;
};

// The pool a segment belongs to: the recorded private pool when one is listed at its address with
// its size, else the default pools.
MempoolId pool_of(const PrivateSegments& private_segments, std::uint64_t address, Bytes size);

// The default pools first (also when empty), then each private pool in id order.
std::vector<PoolUsage> pool_usage(std::span<const PoolSegment> segments,
                                  const PrivateSegments& private_segments);

// "CUDA graph" for a graph's own pool (n,0), "graph pool handle or MemPool" for (0,n) (PyTorch
// numbers both from one counter), "default" for (0,0).
std::string pool_kind(const MempoolId& pool);

// One line per pool: "default pools: 51 segments, 1.20 GiB reserved, 1.00 GiB live, 204.00 MiB
// cached free"; "" when there is no private pool (nothing to tell apart).
std::string describe_pools(const std::vector<PoolUsage>& pools);

}  // namespace fragscope::analysis
