#pragma once
// Shared helpers for the snapshot tests: fixture names, reading fixtures once, and a temporary
// directory per test binary.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot::test {

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {"gpt_ckpt_accum",        "gpt_fixedlen_default",
                                                 "gpt_oom_cap",           "gpt_varlen_default",
                                                 "gpt_varlen_expandable", "random_default",
                                                 "random_split64_round4", "streams_default"};
  return names;
}

inline std::filesystem::path fixture_path(const std::string& name) {
  return std::filesystem::path(FRAGSCOPE_FIXTURES) / (name + ".pickle.gz");
}

// Fixtures are read once per test binary; the reader itself is tested separately.
inline const Snapshot& fixture(const std::string& name) {
  static std::map<std::string, Snapshot> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, read_snapshot(fixture_path(name))).first;
  return it->second;
}

inline std::filesystem::path temp_dir() {
  auto dir = std::filesystem::path(FRAGSCOPE_BINARY_DIR) / "test-tmp" / "snapshot";
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace fragscope::snapshot::test
