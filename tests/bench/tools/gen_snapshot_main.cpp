// fragscope-gen-snapshot: writes a large snapshot that replays exactly, by repeating a recorded
// trace (tests/bench/tools/large_snapshot.h).
// usage: fragscope-gen-snapshot SOURCE.pickle[.gz] OUT.pickle[.gz] --entries N
//        [--frames-lists per_call|per_stack]
// Frames lists are written as PyTorch writes them (per_call) unless per_stack asks for the
// smaller file FragScope's own export writes (pickle_writer.h).
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "engine/snapshot/pickle_writer.h"
#include "large_snapshot.h"

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: fragscope-gen-snapshot SOURCE.pickle[.gz] OUT.pickle[.gz] --entries N "
      "[--frames-lists per_call|per_stack]\n";
  if ((argc != 5 && argc != 7) || std::string(argv[3]) != "--entries" ||
      (argc == 7 && std::string(argv[5]) != "--frames-lists")) {
    std::cerr << kUsage;
    return 2;
  }
  fragscope::snapshot::WriteOptions options;
  options.frames_lists = fragscope::snapshot::FramesLists::per_call;
  if (argc == 7) {
    const std::string layout = argv[6];
    if (layout == "per_stack") {
      options.frames_lists = fragscope::snapshot::FramesLists::per_stack;
    } else if (layout != "per_call") {
      std::cerr << "fragscope-gen-snapshot: --frames-lists must be per_call or per_stack, not '"
                << layout << "'\n"
                << kUsage;
      return 2;
    }
  }
  try {
    const auto source = fragscope::snapshot::read_snapshot(argv[1]);
    const auto entries = static_cast<std::size_t>(std::stoull(argv[4]));
    const auto big = fragscope::bench::repeat_recorded_trace(source, entries);
    fragscope::snapshot::write_snapshot(big, argv[2], options);
    std::cout << argv[2] << ": " << big.trace_entry_count() << " entries\n";
  } catch (const std::exception& e) {
    std::cerr << "fragscope-gen-snapshot: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
