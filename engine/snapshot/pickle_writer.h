#pragma once
// Writes a Snapshot as PyTorch writes one (torch.cuda.memory._dump_snapshot: a pickled dict,
// protocol 4), so pytorch.org/memory_viz, torch.cuda._memory_viz and pickle.load read it.
// Repeated strings and frames are written once and referenced through the memo, as Python's
// pickler does. Trace entry fields FragScope does not keep (compile_context, user_metadata) are
// left out rather than invented; readers treat them as optional.
#include <filesystem>
#include <string>

#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {

// The pickle bytes.
std::string write_snapshot_pickle(const Snapshot& snapshot);

// Writes to `path`, gzip-compressed when the name ends in ".gz". The file is written under a
// temporary name and renamed, so a failure never leaves half a file; errors are InputError.
void write_snapshot(const Snapshot& snapshot, const std::filesystem::path& path);

}  // namespace fragscope::snapshot
