// CudaDevice on a real GPU: segments and expandable-segment pages are real memory, the bytes it
// holds are what the driver reports in use, and out-of-memory is an answer, not an exception.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_device.h"
#include "engine/cuda/cuda_error.h"
#include "engine/cuda/environment.h"
#include "gpu_test_util.h"

namespace fragscope::cuda {
namespace {

using namespace fragscope::literals;

Bytes driver_free() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return free_bytes;
}

TEST(GpuEnvironment, WithoutGpuEverythingSaysWhy) {
  const auto reason = gpu_unavailable_reason();
  if (!reason)
    GTEST_SKIP() << "a GPU is present; this checks the behaviour without one";
  EXPECT_FALSE(reason->empty());
  EXPECT_THROW(query_environment(), GpuUnavailable);
  EXPECT_THROW(CudaDevice{}, GpuUnavailable);
}

TEST(GpuEnvironment, DescribesTheDevice) {
  FRAGSCOPE_REQUIRE_GPU();
  const GpuEnvironment env = query_environment();
  EXPECT_FALSE(env.name.empty());
  EXPECT_GT(env.total_memory, 1_GiB);
  EXPECT_LE(env.free_memory_at_start, env.total_memory);
  EXPECT_NE(env.driver_version, "0.0");
  EXPECT_NE(env.runtime_version, "0.0");
  EXPECT_EQ(env.uuid.rfind("GPU-", 0), 0u) << env.uuid;
  EXPECT_EQ(env.uuid.size(), 40u) << env.uuid;
}

TEST(CudaVersionString, ReadsLikeNvidiaSmi) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
}

TEST(CudaDevice, SegmentsAreRealMemory) {
  FRAGSCOPE_REQUIRE_GPU();
  CudaDevice device;
  const Bytes before = driver_free();
  auto a = device.allocate_segment(20_MiB);
  auto b = device.allocate_segment(64_MiB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(device.bytes_in_use(), 84_MiB);
  // The driver accounts in 2 MiB pages; both sizes are multiples, so the drop is at least ours.
  EXPECT_GE(before - driver_free(), 84_MiB);
  ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(*b), 1, 64_MiB), cudaSuccess);
  device.free_segment(*a, 20_MiB);
  device.free_segment(*b, 64_MiB);
  EXPECT_EQ(device.bytes_in_use(), 0u);
  EXPECT_EQ(device.calls().segment_allocs, 2u);
  EXPECT_EQ(device.calls().segment_frees, 2u);
  EXPECT_EQ(device.call_stats().cuda_malloc.count, 2u);
  EXPECT_GT(device.call_stats().cuda_malloc.total_ns, 0);
}

TEST(CudaDevice, TooLargeSegmentIsOutOfMemoryNotAnError) {
  FRAGSCOPE_REQUIRE_GPU();
  CudaDevice device;
  EXPECT_FALSE(device.allocate_segment(device.total_memory() * 2).has_value());
  EXPECT_EQ(device.calls().segment_alloc_failures, 1u);
  EXPECT_EQ(device.bytes_in_use(), 0u);
  // The failure left no sticky error behind: the next allocation works.
  auto ok = device.allocate_segment(2_MiB);
  ASSERT_TRUE(ok.has_value());
  device.free_segment(*ok, 2_MiB);
}

TEST(CudaDevice, ExpandablePagesMapAndUnmapOneByOne) {
  FRAGSCOPE_REQUIRE_GPU();
  if (!query_environment().virtual_memory_management)
    GTEST_SKIP() << "this GPU has no virtual memory management";
  CudaDevice device;
  auto base = device.reserve_address_space(8 * 20_MiB, 20_MiB);
  ASSERT_TRUE(base.has_value());
  EXPECT_EQ(device.bytes_in_use(), 0u) << "a reservation holds no memory";
  const Bytes before = driver_free();
  ASSERT_TRUE(device.map_pages(*base, 3 * 20_MiB));
  EXPECT_EQ(device.bytes_in_use(), 60_MiB);
  EXPECT_GE(before - driver_free(), 60_MiB);
  // The mapped range is usable memory.
  ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(*base), 7, 60_MiB), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  device.unmap_pages(*base + 20_MiB, 20_MiB);  // the middle page alone
  EXPECT_EQ(device.bytes_in_use(), 40_MiB);
  ASSERT_TRUE(device.map_pages(*base + 20_MiB, 20_MiB));
  device.unmap_pages(*base, 3 * 20_MiB);
  EXPECT_EQ(device.bytes_in_use(), 0u);
  device.release_address_space(*base, 8 * 20_MiB);
  EXPECT_EQ(device.calls().maps, 2u);
  EXPECT_EQ(device.calls().unmaps, 2u);
}

TEST(CudaDevice, MisuseIsACudaErrorNamingTheCall) {
  FRAGSCOPE_REQUIRE_GPU();
  CudaDevice device;
  EXPECT_THROW(device.free_segment(0x1000, 2_MiB), CudaError);
  auto base = device.reserve_address_space(4 * 2_MiB, 2_MiB);
  ASSERT_TRUE(base.has_value());
  EXPECT_THROW(device.map_pages(*base + 1, 2_MiB), CudaError);  // not page aligned
  ASSERT_TRUE(device.map_pages(*base, 2_MiB));
  EXPECT_THROW(device.release_address_space(*base, 4 * 2_MiB), CudaError);  // still mapped
  device.unmap_pages(*base, 2_MiB);
  device.release_address_space(*base, 4 * 2_MiB);
}

}  // namespace
}  // namespace fragscope::cuda
