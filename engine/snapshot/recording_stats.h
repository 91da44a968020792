#pragma once
// What a recorder writes beside its snapshot, NAME.stats.json, read at the edge: a user's file
// like any other, so bounded (engine/core/input_file.h) and checked to be a JSON object. The
// fields FragScope reads (all optional, any other field is kept as it is):
//   memory_stats   PyTorch's torch.cuda.memory_stats() at the end of the recording
//   outcome        "ok", or "oom: " and the OOM message
//   alloc_conf     PYTORCH_CUDA_ALLOC_CONF as the recording ran it
//   torch, cuda, device, total_memory   the build and the device
//   step_ends_us   the end time of every optimizer step (the trace's clock)
//   allowed_bytes  the per-process cap: the allocator's own limit (fraction x device total)
// The recorders of the bundled fixtures (tests/fixtures/*/record*.py) predate fragscope-record
// and wrote the cap as params.cap_gib (set_per_process_memory_fraction to exactly that many
// GiB). The reader translates it into allowed_bytes, so everything after the edge knows one
// name for the cap.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fragscope::snapshot {

// `text` as a stats document, its cap under allowed_bytes; an InputError naming `source` and the
// place when it is not bounded, well-formed JSON or not an object.
nlohmann::json parse_recording_stats(std::string_view text, const std::string& source);
// The same for a file (NAME.stats.json, or any file given for it); a FIFO or other non-regular
// file is refused without being opened.
nlohmann::json read_recording_stats(const std::string& stats_path);

}  // namespace fragscope::snapshot
