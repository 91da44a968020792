#pragma once
// Tests that bound what a piece of work allocates: the bytes operator new holds, counted by the
// replacement operator new of tests/counted_new.cpp (a test binary that includes this header
// lists that file among its sources, so all its allocations go through it). Exact where a
// HeapPeak (heap_test_util.h) only sees the samples it is given: a peak inside one call counts.
#include <cstddef>

namespace fragscope::test {

// The bytes operator new holds now (malloc_usable_size of each block).
std::size_t new_bytes();

// The most operator new held at once since it was made, beyond what it held then. One at a time.
class NewPeak {
 public:
  NewPeak();
  std::size_t grown() const;

 private:
  std::size_t before_;
};

}  // namespace fragscope::test
