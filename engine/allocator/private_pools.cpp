// Private pools: creation and reference counting, capture routing (beginAllocateToPool /
// endAllocateToPool / releasePool) and the order of freeable pools, as PyTorch 2.11's
// DeviceCachingAllocator has them (spec §13).
#include "engine/allocator/private_pools.h"

#include <algorithm>
#include <bit>

#include "engine/allocator/allocator_state.h"
#include "engine/allocator/caching_allocator.h"

namespace fragscope::alloc::detail {

// --- FreeablePools: ska::flat_hash_map's slot order ---------------------------------------------

std::size_t FreeablePools::desired_slot(MempoolId id) const {
  const std::uint64_t hash = id.first != 0 ? id.first : id.second;  // MempoolIdHash
  return static_cast<std::size_t>((11400714819323198485ull * hash) >> shift_);
}

void FreeablePools::rehash(std::size_t wanted) {
  wanted = std::max<std::size_t>(
      wanted, static_cast<std::size_t>((static_cast<double>(size_) / 0.5) + 0.999999));
  const std::size_t slots = std::max<std::size_t>(2, std::bit_ceil(wanted));
  const int log2 = std::countr_zero(slots);
  std::vector<Slot> old = std::move(slots_);
  slot_count_ = slots;
  shift_ = 64 - log2;
  max_lookups_ = static_cast<std::int8_t>(std::max(4, log2));
  slots_.assign(slots + static_cast<std::size_t>(max_lookups_), Slot{});
  slots_.back().distance = 0;  // the end sentinel
  size_ = 0;
  for (std::size_t i = 0; i + 1 < old.size(); ++i)
    if (old[i].distance >= 0)
      insert(old[i].id, old[i].pool);
}

void FreeablePools::grow() {
  rehash(std::max<std::size_t>(4, 2 * slot_count_));
}

bool FreeablePools::place(MempoolId id, PrivatePool* pool) {
  std::size_t at = desired_slot(id);
  std::int8_t distance = 0;
  while (slots_[at].distance >= distance) {
    ++at;
    ++distance;
  }
  if (distance == max_lookups_ ||
      static_cast<double>(size_ + 1) > static_cast<double>(slot_count_) * 0.5)
    return false;
  Slot carried{distance, id, pool};
  // Robin hood: take the slot of an entry closer to home and carry that one on.
  for (;; ++at) {
    if (slots_[at].distance < 0) {
      slots_[at] = carried;
      ++size_;
      return true;
    }
    if (slots_[at].distance < carried.distance) {
      std::swap(slots_[at], carried);
    }
    ++carried.distance;
    if (carried.distance == max_lookups_) {
      // PyTorch grows and re-inserts the carried entry; the first one stays where it went.
      grow();
      return insert(carried.id, carried.pool);
    }
  }
}

bool FreeablePools::insert(MempoolId id, PrivatePool* pool) {
  if (contains(id))
    return false;
  if (slot_count_ == 0)
    grow();
  while (!place(id, pool))
    grow();
  return true;
}

bool FreeablePools::contains(MempoolId id) const {
  for (std::size_t i = 0; i + 1 < slots_.size(); ++i)
    if (slots_[i].distance >= 0 && slots_[i].id == id)
      return true;
  return false;
}

bool FreeablePools::erase(MempoolId id) {
  for (std::size_t i = 0; i + 1 < slots_.size(); ++i) {
    if (slots_[i].distance < 0 || slots_[i].id != id)
      continue;
    // Backward shift: later entries not at their desired slot move one back.
    std::size_t at = i;
    while (slots_[at + 1].distance > 0) {
      slots_[at] = slots_[at + 1];
      --slots_[at].distance;
      ++at;
    }
    slots_[at] = Slot{};
    --size_;
    return true;
  }
  return false;
}

std::vector<std::pair<MempoolId, PrivatePool*>> FreeablePools::in_order() const {
  std::vector<std::pair<MempoolId, PrivatePool*>> out;
  for (std::size_t i = 0; i + 1 < slots_.size(); ++i)
    if (slots_[i].distance >= 0)
      out.emplace_back(slots_[i].id, slots_[i].pool);
  return out;
}

// --- pools and captures -----------------------------------------------------------------------

PrivatePool& create_or_incref_pool(AllocatorState& state, MempoolId id, PoolOptions options) {
  if (id.is_default())
    throw PoolError("createOrIncrefPool: (0, 0) is the default pool, not a private pool");
  auto it = state.graph_pools.find(id);
  if (it == state.graph_pools.end()) {
    auto pool = std::make_unique<PrivatePool>(&state.node_memory, id, options);
    it = state.graph_pools.emplace(id, std::move(pool)).first;
    if (options.use_on_oom)
      state.use_on_oom_pools.insert(id);
    return *it->second;
  }
  if (it->second->use_count <= 0)
    throw PoolError("pool " + to_string(id) + " was released (use_count 0) and cannot be reused");
  ++it->second->use_count;
  return *it->second;
}

void begin_allocate_to_pool(AllocatorState& state, MempoolId id,
                            std::optional<std::uint64_t> stream) {
  for (const CaptureUnderway& capture : state.captures_underway)
    if (capture.pool == id)
      throw PoolError("beginAllocateToPool: already recording to mempool_id " + to_string(id));
  create_or_incref_pool(state, id, {});
  state.captures_underway.push_back(CaptureUnderway{id, stream});
}

void end_allocate_to_pool(AllocatorState& state, MempoolId id) {
  auto& captures = state.captures_underway;
  auto it = std::find_if(captures.begin(), captures.end(),
                         [&](const CaptureUnderway& c) { return c.pool == id; });
  if (it == captures.end())
    throw PoolError("endAllocatePool: not currently recording to mempool_id " + to_string(id));
  captures.erase(it);
}

void release_pool(AllocatorState& state, MempoolId id) {
  auto it = state.graph_pools.find(id);
  if (it == state.graph_pools.end())
    throw PoolError("releasePool: no pool " + to_string(id));
  PrivatePool& pool = *it->second;
  if (pool.use_count <= 0)
    throw PoolError("releasePool: pool " + to_string(id) + " is already released");
  if (--pool.use_count == 0)
    state.graph_pools_freeable.insert(id, &pool);
}

BlockPool& select_pool(AllocatorState& state, Bytes size, std::uint64_t stream) {
  const auto kind =
      static_cast<std::size_t>(size <= kSmallSize ? PoolKind::small : PoolKind::large);
  // The latest matching capture wins (PyTorch searches captures_underway in LIFO order).
  for (auto it = state.captures_underway.rbegin(); it != state.captures_underway.rend(); ++it) {
    if (it->matches(stream))
      return state.graph_pools.at(it->pool)->pools[kind];
  }
  return state.pools[kind];
}

Bytes private_pool_free_bytes(const AllocatorState& state) {
  Bytes bytes = 0;
  for (const auto& [id, pool] : state.graph_pools)
    for (const BlockPool& blocks : pool->pools)
      for (const Block* b : blocks.blocks)
        bytes += b->size;
  return bytes;
}

}  // namespace fragscope::alloc::detail
