#pragma once
// Size rounding of PyTorch 2.11's caching allocator (torch-allocator-spec §1): the block size a
// request gets, which pool it goes to, and how big a new segment for it is.
#include <array>
#include <cstdint>

#include "engine/allocator/config.h"
#include "engine/core/pool_kind.h"
#include "engine/core/units.h"

namespace fragscope::alloc {

inline constexpr Bytes kMinBlockSize = 512;            // every block is a multiple of this
inline constexpr Bytes kSmallSize = 1 * kMiB;          // rounded sizes <= this: small pool
inline constexpr Bytes kSmallBuffer = 2 * kMiB;        // small-pool segment (and page) size
inline constexpr Bytes kMinLargeAlloc = 10 * kMiB;     // below: a large_segment_size segment
inline constexpr Bytes kRoundLarge = 2 * kMiB;         // larger segments round up to this
inline constexpr Bytes kOneExbibyte = Bytes{1} << 60;  // allocate() refuses sizes >= this

using fragscope::PoolKind;  // engine/core/pool_kind.h

// round_size(n): the block size for a request of n bytes (n >= 1), with the configured
// roundup_power2_divisions table (spec §1.2, §1.3). `one_division_unrounded`: PyTorch <= 2.0's
// rule, where one division returned a request above 512 bytes as it was (§14.1).
Bytes round_size(Bytes requested, const AllocatorConfig& config,
                 bool one_division_unrounded = false);
// The same with only the table (what a snapshot's layout rules carry). Requests of 1 EiB and
// more never reach it (the allocator refuses them first).
Bytes round_size(Bytes requested,
                 const std::array<std::uint64_t, kRoundupIntervals>& roundup_power2_divisions);

// The entry of the roundup_power2_divisions table that applies to an unrounded request.
std::uint64_t roundup_divisions(Bytes requested, const AllocatorConfig& config);

// Small pool iff the rounded size is at most 1 MiB.
constexpr PoolKind pool_for(Bytes rounded) {
  return rounded <= kSmallSize ? PoolKind::small : PoolKind::large;
}

// Whether a free block of `block_size` bytes in `pool` is split when `rounded` bytes of it are
// handed out (spec §3.3): small-pool and expandable blocks keep any remainder of at least 512
// bytes; large blocks only below max_split_size and with more than 1 MiB left over.
constexpr bool should_split(Bytes block_size, Bytes rounded, PoolKind pool, Bytes max_split_size,
                            bool expandable_segments) {
  const Bytes remaining = block_size - rounded;
  if (pool == PoolKind::small || expandable_segments)
    return remaining >= kMinBlockSize;
  return rounded < max_split_size && remaining > kSmallSize;
}
constexpr bool should_split(Bytes block_size, Bytes rounded, PoolKind pool,
                            const AllocatorConfig& config) {
  return should_split(block_size, rounded, pool, config.max_split_size, config.expandable_segments);
}

// Size of the segment cudaMalloc'd for a rounded request that found no cached block (§1.4).
Bytes allocation_size(Bytes rounded, const AllocatorConfig& config);

}  // namespace fragscope::alloc
