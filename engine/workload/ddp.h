#pragma once
// DistributedDataParallel's gradient buckets, as torch 2.11's Reducer makes them (engine-internal,
// called by StepGenerator). What a 2-rank gloo recording on one H200 shows
// (tests/fixtures/ddp-gloo-2.11-h200, record_ddp.py):
// - construction: _sync_module_states broadcasts the parameters in flat chunks of at most
//   250 MiB (compute_bucket_assignment_by_size over the parameters in order; a chunk closes once
//   it reaches the cap), two chunks in flight; then the Reducer allocates ONE flat fp32 bucket
//   holding every parameter's gradient (before the first backward the order gradients become
//   ready is unknown, so DDP uses a single bucket);
// - the first forward of the second iteration rebuilds the buckets in the order the gradients
//   became ready in the first backward: the single bucket is freed, then one flat buffer per
//   bucket is allocated, the first closing at 1 MiB (_DEFAULT_FIRST_BUCKET_BYTES), the rest at
//   bucket_cap_mb (25 MiB); the buckets live as long as the model.
// - gradient_as_bucket_view=False (the default): .grad stays a separate tensor (the single-GPU
//   loop's), copied into its bucket view before the all-reduce and back after it.
#include <cstddef>
#include <vector>

#include "engine/core/request.h"
#include "engine/core/units.h"

namespace fragscope::workload {

inline constexpr Bytes kDdpBroadcastBucketBytes = 250 * kMiB;
inline constexpr Bytes kDdpFirstBucketBytes = 1 * kMiB;
inline constexpr Bytes kDdpDefaultBucketCapBytes = 25 * kMiB;

// c10d's compute_bucket_assignment_by_size for tensors of one dtype and device: tensors are
// added in the given order and a bucket closes once its size reaches the current limit; the
// limits are used in turn, the last one for every later bucket. Returns each bucket's bytes.
std::vector<Bytes> ddp_bucket_sizes(const std::vector<Bytes>& tensor_bytes,
                                    const std::vector<Bytes>& limits);

namespace detail {

class Builder;

class DdpBuckets {
 public:
  // `param_bytes`: each parameter's gradient bytes, in parameter (definition) order.
  DdpBuckets(Builder& builder, std::vector<Bytes> param_bytes, Bytes bucket_cap);
  // After the parameters exist: the broadcast of the module state and the initial bucket.
  void construct();
  // A parameter's gradient became ready (AccumulateGrad); the first iteration's order decides
  // the rebuilt buckets.
  void gradient_ready(int param);
  // At the start of every optimizer step: the second one rebuilds the buckets.
  void step_begins(int step);
  // The model goes away: its buckets with it.
  void teardown();

 private:
  Builder& b_;
  std::vector<Bytes> param_bytes_;
  Bytes bucket_cap_;
  std::vector<int> ready_order_;
  std::vector<bool> seen_;
  std::vector<TensorId> buckets_;
  bool rebuilt_ = false;
};

}  // namespace detail
}  // namespace fragscope::workload
