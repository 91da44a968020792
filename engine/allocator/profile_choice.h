#pragma once
// Which release's allocator rules (engine/allocator/profile.h) an analysis followed, and why:
// replay, advise, summary, the post-mortem, the GUI and the report all name it, since the same
// trace can decide differently under another release.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/allocator/profile.h"

namespace fragscope::alloc {

// Where the release a replay follows came from: every front-end names it, since the same trace
// can decide differently under another release's rules.
enum class ProfileSource : std::uint8_t {
  snapshot_format,  // the snapshot's layout (snapshot::guess_torch_version); a range gives its
                    // newest
  user,             // --torch-version
  assumed,          // nothing said which release: the latest the model knows
};

// The release whose allocator rules a replay, a summary or a what-if of a run used, and why.
struct ProfileChoice {
  TorchVersion version = kLatestTorch;
  ProfileSource source = ProfileSource::assumed;
  std::string range;     // the releases the format fits, e.g. "2.5-2.7" (snapshot_format)
  std::string evidence;  // e.g. "external_annotations, trace entries without compile_context"

  AllocatorProfile profile() const { return allocator_profile(version); }
  // One line for the user, e.g. "PyTorch 2.7's allocator rules (the snapshot's format fits
  // 2.5-2.7: external_annotations, ...; the newest of them assumed)".
  std::string describe() const;
  friend bool operator==(const ProfileChoice&, const ProfileChoice&) = default;
};

// "snapshot format", "--torch-version", "assumed".
std::string_view to_string(ProfileSource source);

}  // namespace fragscope::alloc
