#pragma once
// Tests that bound the heap a piece of work holds beside its input: the heap in use (malloc'd
// chunks and mmap'd ones, from mallinfo2) when a HeapPeak is made, and the most seen at any
// sample() since, taken from the work's progress reports or sinks.
#include <malloc.h>

#include <algorithm>
#include <cstddef>

namespace fragscope::test {

class HeapPeak {
 public:
  HeapPeak() : before_(in_use()), peak_(before_) {}

  // mallinfo2 reports nothing under a sanitizer's allocator.
  bool measurable() const { return before_ != 0; }
  void sample() { peak_ = std::max(peak_, in_use()); }
  // The most the heap grew by at a sample, since the HeapPeak was made.
  std::size_t grown() const { return peak_ - before_; }

 private:
  static std::size_t in_use() {
    const struct mallinfo2 info = ::mallinfo2();
    return info.uordblks + info.hblkhd;
  }
  std::size_t before_;
  std::size_t peak_;
};

}  // namespace fragscope::test
