#include "engine/analysis/pool_usage.h"

#include <map>

#include "engine/allocator/summary.h"

namespace fragscope::analysis {

MempoolId pool_of(const PrivateSegments& private_segments, std::uint64_t address, Bytes size) {
  if (const auto it = private_segments.find(address);
      it != private_segments.end() && it->second.size == size)
    return it->second.pool;
  return MempoolId{};
}

std::vector<PoolUsage> pool_usage(std::span<const PoolSegment> segments,
                                  const PrivateSegments& private_segments) {
  std::map<MempoolId, PoolUsage> by_pool;
  by_pool[MempoolId{}].pool = MempoolId{};
  for (const PoolSegment& segment : segments) {
    const MempoolId pool = pool_of(private_segments, segment.address, segment.size);
    PoolUsage& usage = by_pool[pool];
    usage.pool = pool;
    ++usage.segments;
    usage.reserved += segment.size;
    usage.live += segment.live;
  }
  std::vector<PoolUsage> out;
  for (const auto& [id, usage] : by_pool)
    out.push_back(usage);
  return out;  // std::map orders (0,0) first
}

std::string pool_kind(const MempoolId& pool) {
  if (pool.is_default())
    return "default";
  // A graph captured without a pool gets its own id (n,0); graph_pool_handle() (torch.compile's
  // CUDA graph trees, vLLM) and torch.cuda.MemPool share the (0,n) counter.
  return pool.first != 0 ? "CUDA graph" : "graph pool handle or MemPool";
}

std::string describe_pools(const std::vector<PoolUsage>& pools) {
  bool any_private = false;
  for (const PoolUsage& usage : pools)
    any_private = any_private || !usage.pool.is_default();
  if (!any_private)
    return "";
  std::string text;
  for (const PoolUsage& usage : pools) {
    text += usage.pool.is_default()
                ? std::string("default pools")
                : "private pool " + to_string(usage.pool) + " (" + pool_kind(usage.pool) + ")";
    text += ": " + std::to_string(usage.segments) + " segment" + (usage.segments == 1 ? "" : "s") +
            ", " + alloc::format_size(usage.reserved) + " reserved, " +
            alloc::format_size(usage.live) + " live, " + alloc::format_size(usage.cached_free()) +
            " cached free";
    if (!usage.pool.is_default() && usage.cached_free() > 0)
      text += " (usable only by this pool's allocations)";
    text += "\n";
  }
  return text;
}

}  // namespace fragscope::analysis
