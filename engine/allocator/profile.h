#pragma once
// What PyTorch's caching allocator did differently in each release (torch-allocator-spec §14),
// as data chosen by TorchVersion: the config parser, the model and the OOM text take one of
// these, so a snapshot written by 2.0 .. 2.11 replays under its own release's rules (the
// release comes from the snapshot's format, snapshot::guess_torch_version, or --torch-version).
// Where the spec dates a change only approximately (≈), the release its table names is used.
#include <string>
#include <string_view>

#include "engine/allocator/config.h"
#include "engine/allocator/summary.h"
#include "engine/core/torch_version.h"

namespace fragscope::alloc {

// torch.OutOfMemoryError's text (§14.3).
enum class OomTextStyle : std::uint8_t {
  v2_0,     // "(GPU d; T total capacity; Y already allocated; F free; R reserved in total ...)"
  v2_1,     // "GPU d has a total capacty of" (sic), no private-pool clause, max_split_size hint
  v2_2,     // "capacity", private-pool clause, expandable_segments hint, pytorch.org URL
  current,  // 2.11 (§6): docs.pytorch.org URL
};

struct AllocatorProfile {
  TorchVersion version = kLatestTorch;
  // §14.2: options the release's parser knows; a later one is an unknown option there.
  bool has_expandable_segments = true;            // 2.1
  bool has_release_lock_on_cudamalloc = true;     // 2.2
  bool has_pinned_host_register = true;           // 2.2 (use_cuda_host_register, num threads)
  bool has_max_non_split_rounding = true;         // ≈2.6 (oversize limit fixed at 20 MiB before)
  bool has_pinned_use_background_threads = true;  // ≈2.6
  bool has_large_segment_size = true;             // 2.9 (20 MiB segments fixed before)
  bool has_graph_capture_record_stream_reuse = true;  // 2.9
  bool has_pinned_reserve_segment_size = true;        // 2.9
  bool has_per_process_memory_fraction_key = true;    // 2.9
  // The message for an unknown key: "Unrecognized CachingAllocator option: K" (<= 2.8) rather
  // than "Unrecognized key 'K' in CUDA allocator config." (the shared config parser of 2.9+).
  bool unknown_key_as_option = false;
  // <= 2.0: round_size's guard was `divisions > 0`, and roundup_power2_next_division returned
  // the size itself for one division, so roundup_power2_divisions:1 left a request above 512
  // bytes unrounded, not even a multiple of 512 (§14.1); later releases need divisions > 1.
  bool one_division_leaves_size_unrounded = false;
  // <= 2.0: max_split_size_mb must be > 20 ("must be > 20"), later >= large_segment_size_mb.
  bool max_split_size_strictly_above_20 = false;
  // 2.1 .. ≈2.8: `>` in the roundup list filled from the last listed interval itself,
  // overwriting its value; later releases start after it (§14.1).
  bool roundup_gt_overwrites_last = false;
  // <= 2.10: set_per_process_memory_fraction(1.0) keeps a limit of the whole device (so
  // garbage_collection_threshold stays active); 2.11 removes the limit (§14.1).
  bool fraction_one_keeps_limit = false;
  OomTextStyle oom_text = OomTextStyle::current;

  friend bool operator==(const AllocatorProfile&, const AllocatorProfile&) = default;
};

// The profile of a release; releases outside 2.0 .. 2.11 get the nearest one's.
AllocatorProfile allocator_profile(TorchVersion version);

// PYTORCH_CUDA_ALLOC_CONF as `profile`'s release parsed it: an option that release did not have
// is an AllocatorConfigError with that release's message, the roundup `>` follows its rule, and
// max_split_size_mb its lower bound; the rest as AllocatorConfig::parse.
AllocatorConfig parse_alloc_conf(std::string_view text, const AllocatorProfile& profile);

// torch.OutOfMemoryError's message as `profile`'s release wrote it.
std::string oom_message(const OomMessageInputs& inputs, const AllocatorProfile& profile);

}  // namespace fragscope::alloc
