#include "engine/core/malloc_tuning.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace fragscope {
namespace {

constexpr const char* kTunables = "GLIBC_TUNABLES";
constexpr const char* kHugeTlb = "glibc.malloc.hugetlb=1";
// Set in the re-executed process so that it knows it already was, and removed there again.
constexpr const char* kReexecuted = "FRAGSCOPE_HUGE_PAGES_SET";

bool transparent_huge_pages_on_request() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string mode((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return mode.find("[madvise]") != std::string::npos;
}

}  // namespace

void use_huge_page_malloc(char** argv) {
#if defined(__GLIBC__) && defined(__linux__)
  if (const char* previous = std::getenv(kReexecuted)) {
    // The re-executed process: glibc has read the tunables, so restore what the user had, and
    // child processes (python, torch-run) start as they would have.
    if (previous[0] == '\0')
      ::unsetenv(kTunables);
    else
      ::setenv(kTunables, previous + 1, 1);
    ::unsetenv(kReexecuted);
    return;
  }
  if (const char* off = std::getenv("FRAGSCOPE_HUGE_PAGES"); off && std::strcmp(off, "0") == 0)
    return;
  const char* tunables = std::getenv(kTunables);
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr)
    return;
  if (argv == nullptr || argv[0] == nullptr || !transparent_huge_pages_on_request())
    return;
  // "=" + the old value, or "" when there was none: the re-executed process restores it.
  const std::string previous = tunables == nullptr ? std::string() : "=" + std::string(tunables);
  const std::string value =
      tunables == nullptr ? std::string(kHugeTlb) : std::string(tunables) + ":" + kHugeTlb;
  ::setenv(kReexecuted, previous.c_str(), 1);
  ::setenv(kTunables, value.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc): run on as we are.
  ::unsetenv(kReexecuted);
  if (tunables == nullptr)
    ::unsetenv(kTunables);
  else
    ::setenv(kTunables, previous.c_str() + 1, 1);
#else
  (void)argv;
#endif
}

}  // namespace fragscope
