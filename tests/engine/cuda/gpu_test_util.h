#pragma once
// Shared by the engine/cuda tests: skip without a GPU, and small deterministic request streams.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/request.h"
#include "engine/cuda/environment.h"

#define FRAGSCOPE_REQUIRE_GPU()                                    \
  do {                                                             \
    if (auto reason = ::fragscope::cuda::gpu_unavailable_reason()) \
      GTEST_SKIP() << "needs an NVIDIA GPU: " << *reason;          \
  } while (false)

namespace fragscope::test {

// `steps` steps of random mallocs and frees (sizes from 1 byte to 64 MiB, some long-lived), with
// a step_begin marker at the start of each step and everything freed at the end.
inline RequestStream random_training_like_stream(int steps, std::uint32_t seed) {
  RequestStream stream;
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> live;
  std::vector<Bytes> sizes;
  std::uint64_t next_tensor = 1;
  auto malloc = [&](Bytes size) {
    stream.requests.push_back(Request{RequestOp::malloc, TensorId{next_tensor}, size, {}, {}});
    live.push_back(next_tensor++);
  };
  auto free_at = [&](std::size_t i) {
    stream.requests.push_back(Request{RequestOp::free, TensorId{live[i]}, 0, {}, {}});
    live[i] = live.back();
    live.pop_back();
  };
  for (int p = 0; p < 6; ++p)  // "parameters": live for the whole run
    malloc(Bytes{4} << 20);
  const std::size_t parameters = live.size();
  for (int step = 0; step < steps; ++step) {
    stream.requests.push_back(Request{RequestOp::step_begin, {}, static_cast<Bytes>(step), {}, {}});
    for (int op = 0; op < 200; ++op) {
      if (live.size() > parameters && rng() % 100 < 45) {
        free_at(parameters + rng() % (live.size() - parameters));
      } else {
        const auto kind = rng() % 10;
        const Bytes size = kind < 5   ? 1 + rng() % (1 << 20)
                           : kind < 9 ? (1 << 20) + rng() % (12 << 20)
                                      : (16 << 20) + rng() % (48 << 20);
        malloc(size);
      }
    }
    while (live.size() > parameters)
      free_at(live.size() - 1);
  }
  return stream;
}

}  // namespace fragscope::test
