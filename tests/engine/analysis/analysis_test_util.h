#pragma once
// Shared helpers for the analysis tests: fixtures read once, their recorded stats.json, and
// small builders for hand-made traces.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/trace.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::analysis::test {

inline std::filesystem::path fixture_dir() {
  return std::filesystem::path(FRAGSCOPE_FIXTURES);
}

inline const snapshot::Snapshot& fixture(const std::string& name) {
  static std::map<std::string, snapshot::Snapshot> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, snapshot::read_snapshot(fixture_dir() / (name + ".pickle.gz"))).first;
  return it->second;
}

inline nlohmann::json fixture_stats(const std::string& name) {
  std::ifstream in(fixture_dir() / (name + ".stats.json"));
  return nlohmann::json::parse(in);
}

// Hand-made trace entries on stream 0 unless given.
inline TraceEvent ev(TraceAction action, std::uint64_t addr, Bytes size, std::uint64_t stream = 0) {
  TraceEvent e;
  e.action = action;
  e.addr = addr;
  e.size = size;
  e.stream = StreamId{stream};
  return e;
}

// free_requested immediately followed by free_completed: a free no other stream used.
inline void free_now(std::vector<TraceEvent>& trace, std::uint64_t addr, Bytes size,
                     std::uint64_t stream = 0) {
  trace.push_back(ev(TraceAction::free_requested, addr, size, stream));
  trace.push_back(ev(TraceAction::free_completed, addr, size, stream));
}

}  // namespace fragscope::analysis::test
