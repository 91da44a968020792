#pragma once
// The allocator profile a snapshot's replay follows, and why: the release its format points at
// (the newest of a range), or the one the user gave with --torch-version.
#include "engine/allocator/profile_choice.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {

alloc::ProfileChoice profile_choice(const TorchVersionGuess& guess);

}  // namespace fragscope::snapshot
