// use_huge_page_malloc() re-executes the binary once with glibc.malloc.hugetlb=1 (where THP is in
// madvise mode) and restores the user's environment, so that child processes start unchanged.
#include "engine/core/malloc_tuning.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace {

namespace fs = std::filesystem;

bool thp_in_madvise_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string mode((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return mode.find("[madvise]") != std::string::npos;
}

struct ProbeResult {
  int starts = 0;      // how many times the process image started
  std::string output;  // what the final image printed
};

// Runs the probe under `env -i` plus the given assignments, so the outer environment cannot leak
// in.
ProbeResult run_probe(const std::string& assignments) {
  const fs::path log =
      fs::temp_directory_path() / ("malloc_tuning_probe_" + std::to_string(::getpid()));
  fs::remove(log);
  const std::string command = "env -i PROBE_START_LOG='" + log.string() + "' " + assignments +
                              " '" + MALLOC_TUNING_PROBE + "'";
  ProbeResult result;
  if (std::FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr)
      result.output += buffer;
    EXPECT_EQ(::pclose(pipe), 0) << command;
  }
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);)
    result.starts += line == "start" ? 1 : 0;
  fs::remove(log);
  return result;
}

TEST(MallocTuning, ReexecutesOnceWithTheTunableAndRestoresAnUnsetEnvironment) {
  if (!thp_in_madvise_mode())
    GTEST_SKIP() << "transparent huge pages are not in madvise mode here";
  const ProbeResult probe = run_probe("");
  EXPECT_EQ(probe.starts, 2);
  EXPECT_NE(probe.output.find("started_with_hugetlb=1"), std::string::npos) << probe.output;
  // The user had no GLIBC_TUNABLES: children must not inherit ours, nor the marker.
  EXPECT_NE(probe.output.find("tunables=<unset>"), std::string::npos) << probe.output;
  EXPECT_NE(probe.output.find("marker=absent"), std::string::npos) << probe.output;
}

TEST(MallocTuning, KeepsTheUsersOwnTunables) {
  if (!thp_in_madvise_mode())
    GTEST_SKIP() << "transparent huge pages are not in madvise mode here";
  const ProbeResult probe = run_probe("GLIBC_TUNABLES=glibc.malloc.tcache_count=3");
  EXPECT_EQ(probe.starts, 2);
  EXPECT_NE(probe.output.find("started_with_hugetlb=1"), std::string::npos) << probe.output;
  EXPECT_NE(probe.output.find("tunables=glibc.malloc.tcache_count=3\n"), std::string::npos)
      << probe.output;
  EXPECT_NE(probe.output.find("marker=absent"), std::string::npos) << probe.output;
}

TEST(MallocTuning, DoesNothingWhenTurnedOffOrAlreadySet) {
  const ProbeResult off = run_probe("FRAGSCOPE_HUGE_PAGES=0");
  EXPECT_EQ(off.starts, 1);
  EXPECT_NE(off.output.find("started_with_hugetlb=0"), std::string::npos) << off.output;
  const ProbeResult set = run_probe("GLIBC_TUNABLES=glibc.malloc.hugetlb=1");
  EXPECT_EQ(set.starts, 1);
  EXPECT_NE(set.output.find("tunables=glibc.malloc.hugetlb=1\n"), std::string::npos) << set.output;
}

}  // namespace
