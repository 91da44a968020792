#include "storage/db/category_pyramid.h"

#include "storage/db/packing.h"

namespace fragscope::storage {
namespace {

constexpr std::uint8_t kCategoryLevelFormat = 1;
constexpr std::uint8_t kCategoryChunkFormat = 1;
// A category row or chunk is far below this raw size; a header claiming more is corrupt.
constexpr std::uint64_t kMaxRawBlob = std::uint64_t{64} << 20;

std::vector<std::uint8_t> with_header(std::uint8_t format, const std::vector<std::uint8_t>& raw) {
  std::vector<std::uint8_t> blob;
  blob.push_back(format);
  put_varint(blob, raw.size());
  const auto compressed = deflate_bytes(raw);
  blob.insert(blob.end(), compressed.begin(), compressed.end());
  return blob;
}

std::vector<std::uint8_t> without_header(std::span<const std::uint8_t> blob, std::uint8_t format,
                                         const std::string& what) {
  ByteReader header(blob, what);
  const auto found = header.byte();
  if (found != format)
    header.fail("unknown category format " + std::to_string(found));
  const std::uint64_t raw_size = header.varint();
  if (raw_size > kMaxRawBlob)
    header.fail("implausible category blob size");
  return inflate_bytes(header.take(header.remaining()), static_cast<std::size_t>(raw_size), what);
}

void put_bytes(std::vector<std::uint8_t>& out, const CategoryBytes& value,
               const CategoryBytes& previous) {
  for (std::size_t c = 0; c < kCategoryCount; ++c)
    put_signed(out, wrapping_sub(value[c], previous[c]));
}
CategoryBytes get_bytes(ByteReader& in, const CategoryBytes& previous) {
  CategoryBytes value{};
  for (std::size_t c = 0; c < kCategoryCount; ++c)
    value[c] = wrapping_add(previous[c], in.signed_varint());
  return value;
}

}  // namespace

std::vector<std::uint8_t> encode_category_buckets(std::span<const CategoryBucket> buckets) {
  std::vector<std::uint8_t> raw;
  raw.reserve(buckets.size() * 16);
  put_varint(raw, buckets.size());
  CategoryBucket previous;
  for (const auto& bucket : buckets) {
    put_varint(raw, bucket.first_event - previous.end_event);
    put_varint(raw, bucket.end_event - bucket.first_event);
    put_varint(raw, bucket.peak_event - bucket.first_event);
    put_signed(raw, wrapping_sub(bucket.t0_us, previous.t1_us));
    put_signed(raw, wrapping_sub(bucket.t1_us, bucket.t0_us));
    put_bytes(raw, bucket.bytes, previous.bytes);
    previous = bucket;
  }
  return with_header(kCategoryLevelFormat, raw);
}

std::vector<CategoryBucket> decode_category_buckets(std::span<const std::uint8_t> blob,
                                                    const std::string& what) {
  const auto raw = without_header(blob, kCategoryLevelFormat, what);
  ByteReader in(raw, what);
  const std::uint64_t count = in.varint();
  if (count > kBucketsPerRow)
    in.fail("implausible bucket count");
  std::vector<CategoryBucket> buckets;
  buckets.reserve(static_cast<std::size_t>(count));
  CategoryBucket previous;
  for (std::uint64_t i = 0; i < count; ++i) {
    CategoryBucket bucket;
    bucket.first_event = previous.end_event + in.varint();
    bucket.end_event = bucket.first_event + in.varint();
    bucket.peak_event = bucket.first_event + in.varint();
    if (bucket.end_event <= bucket.first_event || bucket.peak_event >= bucket.end_event)
      in.fail("bucket with a bad event range");
    bucket.t0_us = wrapping_add(previous.t1_us, in.signed_varint());
    bucket.t1_us = wrapping_add(bucket.t0_us, in.signed_varint());
    bucket.bytes = get_bytes(in, previous.bytes);
    buckets.push_back(bucket);
    previous = bucket;
  }
  if (!in.at_end())
    in.fail("trailing bytes");
  return buckets;
}

void CategoryChunk::clear(const CategoryBytes& bytes_before) {
  start = bytes_before;
  times_us.clear();
  categories.clear();
  deltas.clear();
}

std::vector<CategoryBucket> CategoryChunk::singles(std::uint64_t chunk_first, std::uint64_t first,
                                                   std::uint64_t end) const {
  std::vector<CategoryBucket> out;
  CategoryBytes bytes = start;
  for (std::size_t i = 0; i < size(); ++i) {
    const std::uint64_t index = chunk_first + i;
    if (index >= end)
      break;
    if (categories[i] != kNoChange)
      bytes[categories[i]] = wrapping_add(bytes[categories[i]], deltas[i]);
    if (index >= first)
      out.push_back(CategoryBucket{index, index + 1, times_us[i], times_us[i], index, bytes});
  }
  return out;
}

std::vector<std::uint8_t> encode_category_chunk(const CategoryChunk& chunk) {
  PackedCategoryChunk packed;
  packed.clear(chunk.start);
  for (std::size_t i = 0; i < chunk.size(); ++i)
    packed.push_back(chunk.times_us[i], chunk.categories[i], chunk.deltas[i]);
  return packed.encode();
}

void PackedCategoryChunk::clear(const CategoryBytes& bytes_before) {
  start_ = bytes_before;
  categories_.clear();
  deltas_.clear();
  times_.clear();
  previous_time_ = 0;
}

std::vector<std::uint8_t> PackedCategoryChunk::encode() const {
  std::vector<std::uint8_t> raw;
  raw.reserve(categories_.size() + deltas_.size() + times_.size() + 128);
  put_varint(raw, categories_.size());
  put_bytes(raw, start_, CategoryBytes{});
  // Columns: categories (one byte each), then the deltas of the events that changed memory, then
  // time deltas; like values together compress best.
  for (const ByteColumn* column : {&categories_, &deltas_, &times_})
    raw.insert(raw.end(), column->bytes().begin(), column->bytes().end());
  return with_header(kCategoryChunkFormat, raw);
}

CategoryChunk decode_category_chunk(std::span<const std::uint8_t> blob, const std::string& what) {
  const auto raw = without_header(blob, kCategoryChunkFormat, what);
  ByteReader in(raw, what);
  const std::uint64_t count = in.varint();
  if (count > raw.size())
    in.fail("implausible event count");
  CategoryChunk chunk;
  chunk.start = get_bytes(in, CategoryBytes{});
  const auto categories = in.take(count);
  chunk.categories.assign(categories.begin(), categories.end());
  chunk.deltas.resize(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < chunk.categories.size(); ++i) {
    const std::uint8_t category = chunk.categories[i];
    if (category == CategoryChunk::kNoChange)
      continue;
    if (category >= kCategoryCount)
      in.fail("unknown category " + std::to_string(category));
    chunk.deltas[i] = in.signed_varint();
  }
  chunk.times_us.resize(static_cast<std::size_t>(count));
  std::int64_t previous_time = 0;
  for (auto& time : chunk.times_us) {
    time = wrapping_add(previous_time, in.signed_varint());
    previous_time = time;
  }
  if (!in.at_end())
    in.fail("trailing bytes");
  return chunk;
}

void CategoryTracker::add_initial(std::uint64_t addr, std::int64_t size) {
  live_.insert_or_assign(addr, {static_cast<std::uint8_t>(Category::unknown), size});
  bytes_[0] += size;
  total_ = wrapping_add(total_, size);
}

CategoryTracker::Change CategoryTracker::apply(const TraceEvent& event, Category category) {
  if (event.action == TraceAction::alloc) {
    const auto index = static_cast<std::uint8_t>(category);
    const auto size = static_cast<std::int64_t>(event.size);
    // An alloc at an address already live (a trace that lost its free) replaces the entry; the
    // lost allocation's bytes stay counted, as they did when this was computed by replay.
    live_.insert_or_assign(event.addr, {index, size});
    bytes_[index] = wrapping_add(bytes_[index], size);
    total_ = wrapping_add(total_, size);
    return {index, size};
  }
  if (event.action == TraceAction::free_completed) {
    if (const Live* found = live_.find(event.addr)) {
      const Live gone = *found;
      live_.erase(event.addr);
      bytes_[gone.category] = wrapping_sub(bytes_[gone.category], gone.size);
      total_ = wrapping_sub(total_, gone.size);
      return {gone.category, wrapping_neg(gone.size)};
    }
  }
  return {};
}

}  // namespace fragscope::storage
