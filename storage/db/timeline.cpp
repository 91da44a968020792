#include "storage/db/timeline.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "storage/db/packing.h"

namespace fragscope::storage {
namespace {

// Format 2 adds the requested series; format 1 rows read with requested = active.
constexpr std::uint8_t kBucketFormat = 2;

void put_series(std::vector<std::uint8_t>& out, const SeriesPoint& value,
                const SeriesPoint& previous) {
  put_signed(out, wrapping_sub(value.allocated, previous.allocated));
  put_signed(out, wrapping_sub(value.reserved, previous.reserved));
  put_signed(out, wrapping_sub(value.active, previous.active));
  put_signed(out, wrapping_sub(value.requested, previous.requested));
}
SeriesPoint get_series(ByteReader& in, const SeriesPoint& previous, std::uint8_t format) {
  SeriesPoint value;
  value.allocated = wrapping_add(previous.allocated, in.signed_varint());
  value.reserved = wrapping_add(previous.reserved, in.signed_varint());
  value.active = wrapping_add(previous.active, in.signed_varint());
  value.requested =
      format >= 2 ? wrapping_add(previous.requested, in.signed_varint()) : value.active;
  return value;
}

}  // namespace

std::uint64_t level_bucket_events(int level) {
  std::uint64_t events = kLevel0Events;
  for (int i = 0; i < level; ++i)
    events *= kLevelFanout;
  return events;
}

std::vector<std::uint8_t> encode_buckets(std::span<const TimelineBucket> buckets) {
  std::vector<std::uint8_t> raw;
  raw.reserve(buckets.size() * 24);
  put_varint(raw, buckets.size());
  TimelineBucket previous;
  for (const auto& bucket : buckets) {
    put_varint(raw, bucket.first_event - previous.end_event);
    put_varint(raw, bucket.end_event - bucket.first_event);
    put_signed(raw, wrapping_sub(bucket.t0_us, previous.t1_us));
    put_signed(raw, wrapping_sub(bucket.t1_us, bucket.t0_us));
    put_series(raw, bucket.max, previous.max);
    put_series(raw, bucket.min, previous.min);
    previous = bucket;
  }
  std::vector<std::uint8_t> blob;
  blob.push_back(kBucketFormat);
  put_varint(blob, raw.size());
  const auto compressed = deflate_bytes(raw);
  blob.insert(blob.end(), compressed.begin(), compressed.end());
  return blob;
}

std::vector<TimelineBucket> decode_buckets(std::span<const std::uint8_t> blob,
                                           const std::string& what) {
  ByteReader header(blob, what);
  const auto format = header.byte();
  if (format != 1 && format != kBucketFormat)
    header.fail("unknown timeline format " + std::to_string(format));
  const std::uint64_t raw_size = header.varint();
  if (raw_size > kBucketsPerRow * 128 + 64)
    header.fail("implausible timeline row size");
  const auto raw =
      inflate_bytes(header.take(header.remaining()), static_cast<std::size_t>(raw_size), what);
  ByteReader in(raw, what);
  const std::uint64_t count = in.varint();
  if (count > kBucketsPerRow)
    in.fail("implausible bucket count");
  std::vector<TimelineBucket> buckets;
  buckets.reserve(static_cast<std::size_t>(count));
  TimelineBucket previous;
  for (std::uint64_t i = 0; i < count; ++i) {
    TimelineBucket bucket;
    bucket.first_event = previous.end_event + in.varint();
    bucket.end_event = bucket.first_event + in.varint();
    bucket.t0_us = wrapping_add(previous.t1_us, in.signed_varint());
    bucket.t1_us = wrapping_add(bucket.t0_us, in.signed_varint());
    bucket.max = get_series(in, previous.max, format);
    bucket.min = get_series(in, previous.min, format);
    buckets.push_back(bucket);
    previous = bucket;
  }
  if (!in.at_end())
    in.fail("trailing bytes");
  return buckets;
}

std::vector<TimelineBucket> regroup_buckets(std::span<const TimelineBucket> source,
                                            std::uint64_t first, std::uint64_t end,
                                            std::size_t count) {
  return regroup_level_buckets(source, first, end, count);
}

}  // namespace fragscope::storage
