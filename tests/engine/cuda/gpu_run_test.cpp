// run_on_gpu: the allocator model on real memory holds exactly the bytes it says it reserves, and
// the two CUDA allocators run the same requests.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/allocator/config.h"
#include "engine/core/error.h"
#include "engine/cuda/cuda_error.h"
#include "engine/cuda/gpu_run.h"
#include "gpu_test_util.h"

namespace fragscope::cuda {
namespace {

using namespace fragscope::literals;

constexpr int kSteps = 4;

GpuRunResult run(GpuAllocator allocator, const RequestStream& stream,
                 alloc::AllocatorConfig config = {}) {
  GpuRunOptions options;
  options.allocator = allocator;
  options.config = std::move(config);
  return run_on_gpu(stream, options);
}

std::size_t count(const RequestStream& stream, RequestOp op) {
  std::size_t n = 0;
  for (const Request& r : stream.requests)
    n += r.op == op ? 1 : 0;
  return n;
}

TEST(GpuAllocatorNames, RoundTrip) {
  for (auto a : {GpuAllocator::model, GpuAllocator::cuda_malloc, GpuAllocator::cuda_malloc_async})
    EXPECT_EQ(gpu_allocator_from_string(to_string(a)), a);
  EXPECT_FALSE(gpu_allocator_from_string("cudamalloc").has_value());
}

TEST(RunOnGpu, WithoutGpuThrowsGpuUnavailable) {
  if (!gpu_unavailable_reason())
    GTEST_SKIP() << "a GPU is present; this checks the behaviour without one";
  EXPECT_THROW(run(GpuAllocator::model, test::random_training_like_stream(1, 1)), GpuUnavailable);
}

// Configurations built field by field, as PYTORCH_CUDA_ALLOC_CONF would set them.
struct NamedConfig {
  const char* name;
  alloc::AllocatorConfig config;
};

NamedConfig default_config() {
  return {"default", {}};
}
NamedConfig expandable_config() {
  NamedConfig c{"expandable_segments", {}};
  c.config.expandable_segments = true;
  return c;
}
NamedConfig split_and_roundup_config() {
  NamedConfig c{"max_split_64_roundup_4", {}};
  c.config.max_split_size = 64_MiB;
  c.config.roundup_power2_divisions.fill(4);
  return c;
}

class ModelOnGpu : public ::testing::TestWithParam<NamedConfig> {};

TEST_P(ModelOnGpu, ReservedBytesAreExactlyTheDeviceMemoryItHolds) {
  FRAGSCOPE_REQUIRE_GPU();
  const RequestStream stream = test::random_training_like_stream(kSteps, 11);
  const GpuRunResult r = run(GpuAllocator::model, stream, GetParam().config);
  ASSERT_FALSE(r.oom.has_value()) << r.oom->message;
  EXPECT_EQ(r.reserved_mismatches, 0u) << r.first_reserved_mismatch;
  EXPECT_EQ(r.requests_run, stream.requests.size());
  EXPECT_EQ(r.mallocs, count(stream, RequestOp::malloc));
  EXPECT_EQ(r.frees, count(stream, RequestOp::free));
  ASSERT_TRUE(r.model_stats.has_value());
  EXPECT_EQ(r.peak_reserved,
            static_cast<Bytes>(r.model_stats->reserved_bytes[alloc::StatType::aggregate].peak));
  EXPECT_GE(r.peak_reserved, r.peak_allocated);
  EXPECT_GT(r.peak_allocated, 24_MiB);  // the parameters alone
  // One record per step plus the setup before the first marker.
  ASSERT_EQ(r.steps.size(), static_cast<std::size_t>(kSteps + 1));
  for (const StepRecord& s : r.steps) {
    EXPECT_GT(s.host_ms, 0.0);
    EXPECT_GE(s.gpu_ms, 0.0);
    // The driver's own count of used memory covers everything the model reserved.
    EXPECT_GE(s.device_used, s.reserved) << "step " << s.step;
  }
  EXPECT_GT(r.device_calls.size(), 0u);
  const nlohmann::json json = to_json(r);
  EXPECT_EQ(json["allocator"], "model");
  EXPECT_EQ(json["model"]["reserved_matches_device"], true);
}

INSTANTIATE_TEST_SUITE_P(Configs, ModelOnGpu,
                         ::testing::Values(default_config(), expandable_config(),
                                           split_and_roundup_config()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ModelOnGpuOptions, EmptyCacheEveryStepGivesSegmentsBack) {
  FRAGSCOPE_REQUIRE_GPU();
  GpuRunOptions options;
  options.empty_cache_every_step = true;
  const GpuRunResult r = run_on_gpu(test::random_training_like_stream(kSteps, 5), options);
  EXPECT_EQ(r.reserved_mismatches, 0u) << r.first_reserved_mismatch;
  EXPECT_EQ(r.empty_cache_calls.count, static_cast<std::uint64_t>(kSteps));
  for (const StepRecord& s : r.steps) {
    if (s.step < 0 || !s.empty_cache_ms)
      continue;
    // Every step frees all but the six 4 MiB parameters, allocated first: five share one 20 MiB
    // segment (large_segment_size), the sixth starts a second. Only those two stay.
    EXPECT_EQ(s.reserved_after_empty_cache, 40_MiB) << "step " << s.step;
  }
}

TEST(ModelOnGpuOptions, CapacityIsThePerProcessLimit) {
  FRAGSCOPE_REQUIRE_GPU();
  GpuRunOptions options;
  options.capacity = 40_MiB;
  const GpuRunResult r = run_on_gpu(test::random_training_like_stream(kSteps, 3), options);
  ASSERT_TRUE(r.oom.has_value());
  EXPECT_NE(r.oom->message.find("allowed"), std::string::npos) << r.oom->message;
  EXPECT_LE(r.peak_reserved, 40_MiB);
  EXPECT_EQ(r.reserved_mismatches, 0u) << r.first_reserved_mismatch;
}

class CudaAllocatorOnGpu : public ::testing::TestWithParam<GpuAllocator> {};

TEST_P(CudaAllocatorOnGpu, RunsTheSameRequests) {
  FRAGSCOPE_REQUIRE_GPU();
  const RequestStream stream = test::random_training_like_stream(kSteps, 11);
  const GpuRunResult r = run(GetParam(), stream);
  ASSERT_FALSE(r.oom.has_value()) << r.oom->message;
  EXPECT_EQ(r.mallocs, count(stream, RequestOp::malloc));
  EXPECT_EQ(r.frees, count(stream, RequestOp::free));
  EXPECT_EQ(r.final_allocated, 6 * 4_MiB);  // the parameters are still live
  EXPECT_GE(r.peak_reserved, r.peak_allocated);
  EXPECT_FALSE(r.model_stats.has_value());
  EXPECT_EQ(r.malloc_calls.count, count(stream, RequestOp::malloc));
  ASSERT_EQ(r.steps.size(), static_cast<std::size_t>(kSteps + 1));
}

TEST_P(CudaAllocatorOnGpu, EmulatedCapacityRefusesLikeAnOom) {
  FRAGSCOPE_REQUIRE_GPU();
  GpuRunOptions options;
  options.allocator = GetParam();
  options.capacity = 40_MiB;
  const GpuRunResult r = run_on_gpu(test::random_training_like_stream(kSteps, 3), options);
  ASSERT_TRUE(r.oom.has_value());
  EXPECT_LE(r.peak_allocated, 40_MiB);
  EXPECT_EQ(r.requests_run, r.oom->request_index + 1);
}

INSTANTIATE_TEST_SUITE_P(Allocators, CudaAllocatorOnGpu,
                         ::testing::Values(GpuAllocator::cuda_malloc,
                                           GpuAllocator::cuda_malloc_async),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(RunOnGpu, FreeOfAnUnknownTensorIsAnInputError) {
  FRAGSCOPE_REQUIRE_GPU();
  RequestStream stream;
  stream.requests.push_back(Request{RequestOp::free, TensorId{42}, 0, {}, {}});
  EXPECT_THROW(run(GpuAllocator::cuda_malloc, stream), InputError);
}

}  // namespace
}  // namespace fragscope::cuda
