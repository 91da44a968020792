#include "engine/workload/ddp.h"

#include "engine/workload/step_generator.h"

namespace fragscope::workload {

std::vector<Bytes> ddp_bucket_sizes(const std::vector<Bytes>& tensor_bytes,
                                    const std::vector<Bytes>& limits) {
  std::vector<Bytes> buckets;
  Bytes current = 0;
  std::size_t limit = 0;
  bool open = false;
  for (const Bytes bytes : tensor_bytes) {
    current += bytes;
    open = true;
    if (!limits.empty() && current >= limits[limit]) {
      buckets.push_back(current);
      current = 0;
      open = false;
      limit = std::min(limit + 1, limits.size() - 1);
    }
  }
  if (open)
    buckets.push_back(current);
  return buckets;
}

namespace detail {

DdpBuckets::DdpBuckets(Builder& builder, std::vector<Bytes> param_bytes, Bytes bucket_cap)
    : b_(builder),
      param_bytes_(std::move(param_bytes)),
      bucket_cap_(bucket_cap),
      seen_(param_bytes_.size(), false) {}

void DdpBuckets::construct() {
  // broadcast_coalesced: flatten a chunk (torch.cat), broadcast, copy back; at most two chunks
  // in flight, so chunk i is freed once chunk i + 2 would start.
  const std::vector<Bytes> chunks = ddp_bucket_sizes(param_bytes_, {kDdpBroadcastBucketBytes});
  std::vector<TensorId> in_flight;
  for (const Bytes chunk : chunks) {
    if (in_flight.size() == 2) {
      b_.free(in_flight.front());
      in_flight.erase(in_flight.begin());
    }
    in_flight.push_back(b_.alloc(chunk, Category::temporary, "ddp.broadcast_flat", -1));
  }
  // The copies back finish before the Reducer's bucket is made; the last chunk's block is
  // still held by the communication stream then (record_stream), so it is released after.
  TensorId last = kNone;
  if (!in_flight.empty()) {
    last = in_flight.back();
    in_flight.pop_back();
  }
  for (const TensorId id : in_flight)
    b_.free(id);
  Bytes total = 0;
  for (const Bytes bytes : param_bytes_)
    total += bytes;
  buckets_.push_back(b_.alloc(total, Category::gradient, "ddp.bucket", -1));
  if (last != kNone)
    b_.free(last);
}

void DdpBuckets::gradient_ready(int param) {
  const auto index = static_cast<std::size_t>(param);
  if (rebuilt_ || index >= seen_.size() || seen_[index])
    return;
  seen_[index] = true;
  ready_order_.push_back(param);
}

void DdpBuckets::step_begins(int step) {
  if (step != 1 || rebuilt_)
    return;
  rebuilt_ = true;
  std::vector<Bytes> ordered;
  for (const int param : ready_order_)
    ordered.push_back(param_bytes_[static_cast<std::size_t>(param)]);
  // Parameters that got no gradient in the first iteration keep their definition order, last.
  for (std::size_t i = 0; i < seen_.size(); ++i) {
    if (!seen_[i])
      ordered.push_back(param_bytes_[i]);
  }
  for (const TensorId id : buckets_)
    b_.free(id);
  buckets_.clear();
  for (const Bytes bucket : ddp_bucket_sizes(ordered, {kDdpFirstBucketBytes, bucket_cap_}))
    buckets_.push_back(b_.alloc(bucket, Category::gradient, "ddp.bucket", -1));
}

void DdpBuckets::teardown() {
  for (const TensorId id : buckets_)
    b_.free(id);
  buckets_.clear();
}

}  // namespace detail
}  // namespace fragscope::workload
