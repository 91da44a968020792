// libFuzzer target: any byte string is either a snapshot or an InputError. Anything else (a
// crash, a sanitizer report, another exception type, a hang) is a bug in the reader.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fragscope::snapshot;
  ReadLimits limits;
  limits.max_decompressed = 256u << 20;  // keep gzip bombs within the fuzzer's memory limit
  try {
    Snapshot s = read_snapshot_from_memory(std::span(data, size), "fuzz-input", limits);
    for (std::size_t d = 0; d < s.device_count() && d < 4; ++d) {
      try {
        (void)build_timeline(s, static_cast<int>(d));
      } catch (const fragscope::InputError&) {
        // An inconsistent trace is bad input, reported as such.
      }
    }
  } catch (const fragscope::InputError&) {
  }
  return 0;
}
