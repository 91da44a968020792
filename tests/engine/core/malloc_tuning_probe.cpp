// A tiny program for malloc_tuning_test: it logs each start of the process, then calls
// use_huge_page_malloc() as fragscope-cli does, and prints what the process ended up with.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/core/malloc_tuning.h"

namespace {

// The environment the kernel handed to this process image: /proc/self/environ keeps the
// exec-time block, which setenv() in use_huge_page_malloc() does not rewrite.
bool exec_environment_has(const std::string& entry) {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  const std::string block((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0;
  while (start < block.size()) {
    const std::size_t end = block.find('\0', start);
    const std::string item = block.substr(start, end - start);
    if (item.find(entry) != std::string::npos)
      return true;
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return false;
}

}  // namespace

int main(int /*argc*/, char** argv) {
  if (const char* log = std::getenv("PROBE_START_LOG")) {
    if (std::FILE* f = std::fopen(log, "a")) {
      std::fputs("start\n", f);
      std::fclose(f);
    }
  }
  fragscope::use_huge_page_malloc(argv);
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::printf("tunables=%s\n", tunables == nullptr ? "<unset>" : tunables);
  std::printf("marker=%s\n", std::getenv("FRAGSCOPE_HUGE_PAGES_SET") == nullptr ? "absent" : "set");
  std::printf("started_with_hugetlb=%d\n", exec_environment_has("glibc.malloc.hugetlb=1") ? 1 : 0);
  return 0;
}
