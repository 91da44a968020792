#include "engine/allocator/sizes.h"

#include <bit>

namespace fragscope::alloc {
namespace {

Bytes round_up(Bytes value, Bytes multiple) {
  return ((value + multiple - 1) / multiple) * multiple;
}

// Rounds n up to the next of `divisions` equal steps between the powers of two around it.
Bytes next_division(Bytes n, std::uint64_t divisions) {
  if (std::has_single_bit(n))
    return n;
  const Bytes floor_power = std::bit_floor(n);
  const Bytes step = floor_power >> std::countr_zero(divisions);
  if (step == 0)
    return floor_power << 1;
  if (n % step == 0)
    return n;
  return (n / step) * step + step;
}

// Index = floor(log2 n) - 20 clamped to [0, 15]: entry 0 covers everything below 2 MiB.
std::size_t roundup_index(Bytes requested) {
  const int log2 = requested == 0 ? 0 : std::bit_width(requested) - 1;
  int index = log2 - 20;
  if (index < 0)
    index = 0;
  if (index > static_cast<int>(kRoundupIntervals) - 1)
    index = static_cast<int>(kRoundupIntervals) - 1;
  return static_cast<std::size_t>(index);
}

}  // namespace

std::uint64_t roundup_divisions(Bytes requested, const AllocatorConfig& config) {
  return config.roundup_power2_divisions[roundup_index(requested)];
}

Bytes round_size(Bytes requested, const AllocatorConfig& config, bool one_division_unrounded) {
  if (one_division_unrounded && requested > kMinBlockSize &&
      config.roundup_power2_divisions[roundup_index(requested)] == 1)
    return requested;
  return round_size(requested, config.roundup_power2_divisions);
}

Bytes round_size(Bytes requested,
                 const std::array<std::uint64_t, kRoundupIntervals>& roundup_power2_divisions) {
  if (requested < kMinBlockSize)
    return kMinBlockSize;
  const std::uint64_t divisions = roundup_power2_divisions[roundup_index(requested)];
  if (divisions > 1 && requested > kMinBlockSize * divisions)
    return next_division(requested, divisions);
  return round_up(requested, kMinBlockSize);
}

Bytes allocation_size(Bytes rounded, const AllocatorConfig& config) {
  if (rounded <= kSmallSize)
    return kSmallBuffer;
  if (rounded < kMinLargeAlloc)
    return config.large_segment_size;
  return round_up(rounded, kRoundLarge);
}

}  // namespace fragscope::alloc
