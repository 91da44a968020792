#pragma once
// The caching allocator's configuration: PYTORCH_CUDA_ALLOC_CONF parsed with PyTorch 2.11's
// tokenizer, parse order and validation (torch-allocator-spec §8). A bad string is an
// AllocatorConfigError with PyTorch's own message, never an abort.
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/core/torch_version.h"
#include "engine/core/units.h"

namespace fragscope::alloc {

class AllocatorConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A string PyTorch 2.11 cannot even tokenize into key:value pairs (`,,`, a key without a value,
// an unclosed `[`). PyTorch hits an internal assert on these (at library load that aborts the
// process); we report them as this error instead.
class MalformedAllocatorConfig : public AllocatorConfigError {
 public:
  using AllocatorConfigError::AllocatorConfigError;
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
  // Applies a settings string on top of this config the way
  // torch._C._accelerator_setAllocatorSettings does at runtime (§8.3): max_split_size, the
  // roundup table and garbage_collection_threshold are reset first, other options keep their
  // values unless the string names them, and the backend cannot change. On error this config is
  // left unchanged.
  void apply(std::string_view text);
  // Warnings PyTorch prints but does not fail on (e.g. cudaMallocAsync ignoring native keys).
  std::string warnings;

  friend bool operator==(const AllocatorConfig&, const AllocatorConfig&) = default;
};

// The config a process starts with, given its environment (`lookup` returns a variable's value,
// or nullopt when unset). PyTorch 2.11 reads only the first set of PYTORCH_CUDA_ALLOC_CONF,
// (PYTORCH_HIP_ALLOC_CONF,) PYTORCH_ALLOC_CONF (§8.1); on CUDA builds the HIP name feeds only the
// common options, not the CUDA-specific ones.
AllocatorConfig config_from_environment(
    const std::function<std::optional<std::string>(std::string_view name)>& lookup);

// A snapshot's `allocator_settings` (§10.2) read for replay, with what it did not say.
struct RecordedAllocatorConfig {
  AllocatorConfig config;
  // False when the snapshot has no allocator_settings (PyTorch 2.0-2.2, memory_snapshot()): the
  // config it ran under is unknown and `config` holds PyTorch's defaults as an assumption.
  bool recorded = true;
  std::vector<std::string> defaulted_keys;  // not recorded: at their defaults
  // Of those, the keys the writing release had and should have recorded (the others came later).
  std::vector<std::string> missing_keys;
  std::vector<std::string> ignored_keys;  // not known to 2.11: ignored
  std::string raw_string_error;  // the raw PYTORCH_CUDA_ALLOC_CONF did not parse (older option)

  // One line for the user; "" when the settings were recorded in full.
  std::string note() const;
};

// A snapshot's `allocator_settings` dict (§10.2), as JSON (nullptr: the snapshot has none): the
// raw PYTORCH_CUDA_ALLOC_CONF string is parsed for the options the dict does not record
// (large_segment_size_mb, backend, ...), and the recorded effective values (max_split_size,
// roundup_power2_divisions, ...) then override it. A key the writing release did not record
// (2.3-2.8 have no graph_capture_record_stream_reuse, ...) takes its default: every release from
// 2.0 to 2.11 starts each option at the same default. A mistyped value is an AllocatorConfigError
// naming the key.
// `writer` is the newest release that may have written the dict (for which keys it had).
RecordedAllocatorConfig read_allocator_settings(const nlohmann::json* settings,
                                                TorchVersion writer = kLatestTorch);
// read_allocator_settings(&settings).config; an empty dict gives the defaults.
AllocatorConfig config_from_allocator_settings(const nlohmann::json& settings);

// A canonical PYTORCH_CUDA_ALLOC_CONF string that parses back to the same options (the `raw` and
// `warnings` members aside). Options at their defaults are left out, so PyTorch's defaults give "".
// A config no string can express (a size that is not whole MiB, a roundup value that is neither 0
// nor a power of two) is an AllocatorConfigError.
std::string to_alloc_conf_string(const AllocatorConfig& config);
// The same options as key/value pairs, in the string's order (to_alloc_conf_string joins them):
// what a config sets, for a view that lists its settings one by one.
std::vector<std::pair<std::string, std::string>> alloc_conf_options(const AllocatorConfig& config);
// The PYTORCH_CUDA_ALLOC_CONF to show or store for `config`: to_alloc_conf_string, or `raw` when
// no string expresses it (a recorded value that is not whole MiB, say).
std::string alloc_conf_text(const AllocatorConfig& config);

}  // namespace fragscope::alloc
