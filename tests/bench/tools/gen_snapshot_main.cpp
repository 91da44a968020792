// fragscope-gen-snapshot: writes a large snapshot that replays exactly, by repeating a recorded
// trace (tests/bench/tools/large_snapshot.h).
// usage: fragscope-gen-snapshot SOURCE.pickle[.gz] OUT.pickle[.gz] --entries N
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "engine/snapshot/pickle_writer.h"
#include "large_snapshot.h"

int main(int argc, char** argv) {
  if (argc != 5 || std::string(argv[3]) != "--entries") {
    std::cerr << "usage: fragscope-gen-snapshot SOURCE.pickle[.gz] OUT.pickle[.gz] --entries N\n";
    return 2;
  }
  try {
    const auto source = fragscope::snapshot::read_snapshot(argv[1]);
    const auto entries = static_cast<std::size_t>(std::stoull(argv[4]));
    const auto big = fragscope::bench::repeat_recorded_trace(source, entries);
    fragscope::snapshot::write_snapshot(big, argv[2]);
    std::cout << argv[2] << ": " << big.trace_entry_count() << " entries\n";
  } catch (const std::exception& e) {
    std::cerr << "fragscope-gen-snapshot: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
