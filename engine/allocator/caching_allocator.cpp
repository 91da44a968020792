#include "engine/allocator/caching_allocator.h"

#include "engine/allocator/caching_allocator_impl.h"

namespace fragscope::alloc {

// --- public shell ------------------------------------------------------------------------------

CachingAllocator::CachingAllocator(AllocatorConfig config, Device& device, EventSink* sink)
    : impl_(std::make_unique<Impl>(std::move(config), device, sink)) {}
CachingAllocator::~CachingAllocator() = default;

MallocResult CachingAllocator::malloc(Bytes bytes, StreamId stream) {
  MallocResult result;
  result.address = impl_->malloc(bytes, stream.value, result.oom);
  return result;
}
std::uint64_t CachingAllocator::malloc(Bytes bytes, StreamId stream,
                                       std::optional<OutOfMemory>& oom) {
  return impl_->malloc(bytes, stream.value, oom);
}
void CachingAllocator::free(std::uint64_t address) {
  impl_->free(address);
}
void CachingAllocator::record_stream(std::uint64_t address, StreamId stream) {
  impl_->record_stream(address, stream.value);
}
void CachingAllocator::mark_events_ready(std::uint64_t address) {
  impl_->mark_events_ready(address);
}
std::vector<std::uint64_t> CachingAllocator::seed(const std::vector<SeedSegment>& segments) {
  return impl_->seed(segments);
}
void CachingAllocator::empty_cache() {
  impl_->release_cached_blocks();
}
void CachingAllocator::empty_cache(MempoolId pool) {
  impl_->release_cached_blocks(pool);
}
void CachingAllocator::create_pool(MempoolId pool, PoolOptions options) {
  create_or_incref_pool(*impl_, pool, options);
}
void CachingAllocator::begin_allocate_to_pool(MempoolId pool, std::optional<StreamId> stream) {
  std::optional<std::uint64_t> filter;
  if (stream)
    filter = stream->value;
  detail::begin_allocate_to_pool(*impl_, pool, filter);
}
void CachingAllocator::end_allocate_to_pool(MempoolId pool) {
  detail::end_allocate_to_pool(*impl_, pool);
}
void CachingAllocator::release_pool(MempoolId pool) {
  detail::release_pool(*impl_, pool);
}
std::optional<int> CachingAllocator::pool_use_count(MempoolId pool) const {
  auto it = impl_->graph_pools.find(pool);
  if (it == impl_->graph_pools.end())
    return std::nullopt;
  return it->second->use_count;
}
bool CachingAllocator::capture_underway() const {
  return !impl_->captures_underway.empty();
}
void CachingAllocator::set_profile(const AllocatorProfile& profile) {
  impl_->apply_profile(profile);
}
const AllocatorProfile& CachingAllocator::profile() const {
  return impl_->profile;
}

void CachingAllocator::set_allowed_memory(std::optional<Bytes> bytes) {
  impl_->allowed = bytes;
}
std::optional<Bytes> CachingAllocator::allowed_memory() const {
  return impl_->allowed;
}
void CachingAllocator::reset_peak_stats() {
  impl_->stats.reset_peak();
}
void CachingAllocator::restore_stats(const DeviceStats& stats) {
  impl_->stats = stats;
}
void CachingAllocator::reset_accumulated_stats() {
  impl_->stats.reset_accumulated();
}
const DeviceStats& CachingAllocator::stats() const {
  return impl_->stats;
}
const AllocatorConfig& CachingAllocator::config() const {
  return impl_->config;
}
Bytes CachingAllocator::total_allocated_memory() const {
  return impl_->total_allocated;
}
Bytes CachingAllocator::gc_check_peak() const {
  return impl_->gc_check_peak;
}
std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  return impl_->snapshot();
}
std::optional<BlockState> CachingAllocator::block_state(std::uint64_t address) const {
  Block* const* found = address == 0 ? nullptr : impl_->active.find(address);
  if (!found)
    return std::nullopt;
  return Impl::state_of(*found);
}
Bytes CachingAllocator::largest_free_block() const {
  Bytes largest = 0;
  auto scan = [&](const BlockPool& pool) {
    for (const Block* b : pool.blocks)
      largest = std::max(largest, b->size);
  };
  for (const auto& pool : impl_->pools)
    scan(pool);
  for (const auto& [id, owner] : impl_->graph_pools)
    for (const auto& pool : owner->pools)
      scan(pool);
  return largest;
}
Bytes CachingAllocator::largest_free_block(StreamId stream) const {
  Bytes largest = 0;
  for (const auto& pool : impl_->pools) {
    // The last block of this stream in (stream, size, address) order is its largest.
    auto it = stream.value == UINT64_MAX ? pool.blocks.end()
                                         : pool.blocks.lower_bound(SizeKey{stream.value + 1, 0, 0});
    if (it != pool.blocks.begin() && (*std::prev(it))->stream == stream.value)
      largest = std::max(largest, (*std::prev(it))->size);
  }
  return largest;
}
std::optional<std::uint64_t> CachingAllocator::cached_block(MempoolId pool, Bytes bytes,
                                                            StreamId stream) const {
  if (bytes == 0)
    return std::nullopt;
  const Bytes size =
      round_size(bytes, impl_->config, impl_->profile.one_division_leaves_size_unrounded);
  const auto kind = static_cast<std::size_t>(pool_for(size));
  const BlockPool* blocks = &impl_->pools[kind];
  if (!pool.is_default()) {
    auto it = impl_->graph_pools.find(pool);
    if (it == impl_->graph_pools.end())
      return std::nullopt;
    blocks = &it->second->pools[kind];
  }
  auto it = blocks->blocks.lower_bound(SizeKey{stream.value, size, 0});
  if (it == blocks->blocks.end() || (*it)->stream != stream.value)
    return std::nullopt;
  const Bytes max_split = impl_->config.max_split_size;
  if (size < max_split && (*it)->size >= max_split)
    return std::nullopt;
  if (size >= max_split && (*it)->size >= size + impl_->config.max_non_split_rounding_size)
    return std::nullopt;
  return (*it)->ptr;
}
std::vector<MempoolId> CachingAllocator::private_pools() const {
  std::vector<MempoolId> ids;
  for (const auto& [id, pool] : impl_->graph_pools)
    ids.push_back(id);
  return ids;
}
std::vector<BlockInfo> CachingAllocator::free_blocks(PoolKind pool) const {
  std::vector<BlockInfo> out;
  for (const Block* b : impl_->pools[static_cast<std::size_t>(pool)].blocks)
    out.push_back(BlockInfo{b->ptr, b->size, b->requested_size, BlockState::inactive});
  return out;
}
bool CachingAllocator::is_valid(std::string* why) const {
  return check_invariants(*impl_, why);
}

}  // namespace fragscope::alloc
