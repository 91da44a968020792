// The replacement operator new that new_bytes_test_util.h reads: every block's usable size is
// added while it is held, and the most held at once is kept for NewPeak.
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "tests/new_bytes_test_util.h"

namespace {

std::atomic<std::size_t> g_new_bytes{0};
std::atomic<std::size_t> g_new_peak{0};

void* counted_new(std::size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr)
    throw std::bad_alloc();
  const std::size_t now = g_new_bytes += malloc_usable_size(p);
  std::size_t peak = g_new_peak.load();
  while (now > peak && !g_new_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_delete(void* p) noexcept {
  if (p == nullptr)
    return;
  g_new_bytes -= malloc_usable_size(p);
  std::free(p);
}

}  // namespace

void* operator new(std::size_t size) {
  return counted_new(size);
}
void* operator new[](std::size_t size) {
  return counted_new(size);
}
void operator delete(void* p) noexcept {
  counted_delete(p);
}
void operator delete[](void* p) noexcept {
  counted_delete(p);
}
void operator delete(void* p, std::size_t) noexcept {
  counted_delete(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  counted_delete(p);
}

namespace fragscope::test {

std::size_t new_bytes() {
  return g_new_bytes.load();
}

NewPeak::NewPeak() : before_(g_new_bytes.load()) {
  g_new_peak = before_;
}

std::size_t NewPeak::grown() const {
  return g_new_peak.load() - before_;
}

}  // namespace fragscope::test
