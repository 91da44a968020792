#pragma once
// Rebuilding a PyTorch snapshot from a stored run, for `fragscope-cli export-snapshot` and the
// GUI: PyTorch's own tools (memory_viz) can then open any run FragScope stored or simulated.
#include "engine/snapshot/snapshot.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

// The run as a one-device snapshot: its events as device_traces[0], its stacks, and the segments
// at its end laid out with PyTorch's rounding and split rules (snapshot::SegmentState) under the
// run's allocator settings (summary["allocator_settings"] when recorded, else the run's
// alloc_conf with default rules). When the events cannot be laid out under those rules, the
// segments come from the stored segment map, with block sizes rounded to 512 bytes, and a
// warning in Snapshot::warnings says so.
snapshot::Snapshot export_snapshot(RunStore& store, RunId run);

}  // namespace fragscope::storage
