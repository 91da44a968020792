#pragma once
// The caching allocator's configuration: PYTORCH_CUDA_ALLOC_CONF parsed with PyTorch 2.11's
// tokenizer, parse order and validation (torch-allocator-spec §8). A bad string is an
// AllocatorConfigError with PyTorch's own message, never an abort.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/core/units.h"

namespace fragscope::alloc {

class AllocatorConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Backend : std::uint8_t { native, cuda_malloc_async };

inline constexpr std::size_t kRoundupIntervals = 16;
inline constexpr Bytes kUnlimited = std::numeric_limits<Bytes>::max();

struct AllocatorConfig {
  Backend backend = Backend::native;
  Bytes max_split_size = kUnlimited;              // max_split_size_mb; kUnlimited = SIZE_MAX
  Bytes max_non_split_rounding_size = 20 * kMiB;  // max_non_split_rounding_mb
  Bytes large_segment_size = 20 * kMiB;           // large_segment_size_mb
  double garbage_collection_threshold = 0.0;      // 0 = off
  std::array<std::uint64_t, kRoundupIntervals> roundup_power2_divisions{};  // 0 = no rounding
  bool expandable_segments = false;
  bool release_lock_on_cudamalloc = false;
  bool pinned_use_cuda_host_register = false;
  bool pinned_use_background_threads = false;
  std::uint64_t pinned_num_register_threads = 1;
  std::uint64_t pinned_reserve_segment_size_mb = 0;
  bool graph_capture_record_stream_reuse = false;
  std::optional<double> per_process_memory_fraction;  // unset = 1.0 (no limit)
  std::string raw;                                    // the string as given, as snapshots record it

  // Parses a PYTORCH_CUDA_ALLOC_CONF string; "" gives PyTorch's defaults.
  static AllocatorConfig parse(std::string_view text);
  // Warnings PyTorch prints but does not fail on (e.g. cudaMallocAsync ignoring native keys).
  std::string warnings;

  friend bool operator==(const AllocatorConfig&, const AllocatorConfig&) = default;
};

}  // namespace fragscope::alloc
