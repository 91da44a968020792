#pragma once
// Writes a Snapshot as PyTorch writes one (torch.cuda.memory._dump_snapshot: a pickled dict,
// protocol 4), so pytorch.org/memory_viz, torch.cuda._memory_viz and pickle.load read it.
// Repeated strings and frame dicts are written once and referenced through the memo, as Python's
// pickler does; how frames lists are shared is WriteOptions::frames_lists. Trace entry fields
// FragScope does not keep (compile_context, user_metadata) are left out rather than invented;
// readers treat them as optional.
#include <filesystem>
#include <string>

#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {

// How the frames lists of blocks and trace entries are written. Every layout reads back to the
// same Snapshot; they differ in size and in the work a reader does.
enum class FramesLists {
  // One list per distinct stack, every repeat a GET of it: the smallest file (export-snapshot).
  per_stack,
  // As PyTorch writes them: _dump_snapshot gives each captured traceback its own list object, so
  // every allocator call writes a fresh list (of GETs of memoized frame dicts); only the entries
  // of one call share it (a malloc's segment_alloc and alloc, a free's free_requested and
  // free_completed), as do the empty stacks. (PyTorch's live blocks also share their alloc
  // entry's list; here each block has its own.) For benchmarks that set reading against
  // pickle.load of the files PyTorch writes.
  per_call,
};

struct WriteOptions {
  FramesLists frames_lists = FramesLists::per_stack;
};

// The pickle bytes.
std::string write_snapshot_pickle(const Snapshot& snapshot, const WriteOptions& options = {});

// Writes to `path`, gzip-compressed when the name ends in ".gz". The file is written under a
// temporary name and renamed, so a failure never leaves half a file; errors are InputError.
void write_snapshot(const Snapshot& snapshot, const std::filesystem::path& path,
                    const WriteOptions& options = {});

}  // namespace fragscope::snapshot
