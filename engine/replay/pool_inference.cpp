#include "engine/replay/pool_inference.h"

#include <algorithm>
#include <set>

namespace fragscope::replay {
namespace {

bool inside(std::uint64_t address, std::uint64_t base, Bytes size) {
  return address >= base && address < base + size;
}

}  // namespace

PoolRouter::PoolRouter(PoolInferenceSettings settings)
    : settings_(std::move(settings)),
      simulated_(settings_.capacity.value_or(alloc::kUnlimited), settings_.total_memory),
      device_(settings_.recorded_segments, simulated_),
      model_(settings_.config, device_) {
  if (settings_.allowed_memory)
    model_.set_allowed_memory(settings_.allowed_memory);
  for (const SegmentPool& segment : settings_.final_segments)
    final_pool_[segment.address] = segment.pool;
}

PoolRouter::~PoolRouter() = default;

void PoolRouter::push(RequestStream& out, RequestOp op, MempoolId pool, std::uint64_t stream,
                      Bytes size) {
  Request r{};
  r.op = op;
  r.stream = StreamId{stream};
  r.size = size;
  r.pool = out.pool_index(pool);
  out.requests.push_back(r);
  ++summary_.pool_requests;
}

void PoolRouter::end_context(MempoolId pool, RequestStream& out) {
  if (!open_.erase(pool))
    return;
  // endAllocateToPool + releasePool, as a warm-up / use_mem_pool context ends.
  push(out, RequestOp::pool_end, pool);
  push(out, RequestOp::pool_release, pool);
  after_entry(out);
}

void PoolRouter::route(std::uint64_t stream, MempoolId pool, RequestStream& out) {
  // Contexts that would catch this stream for another pool end first.
  std::vector<MempoolId> catching;
  for (const auto& [id, context] : open_)
    if (id != pool && (!context.stream || *context.stream == stream))
      catching.push_back(id);
  for (const MempoolId& id : catching)
    end_context(id, out);
  if (pool.is_default())
    return;
  auto open = open_.find(pool);
  if (open != open_.end()) {
    if (!open->second.stream || *open->second.stream == stream)
      return;
    // The pool serves a second stream: one context for every stream (use_mem_pool).
    end_context(pool, out);
    for (const auto& [id, context] : open_)
      if (!context.stream)
        end_context(id, out);
    push(out, RequestOp::pool_begin, pool, stream, 1);
    open_[pool] = Context{std::nullopt};
    after_entry(out);
    return;
  }
  if (!owned_.contains(pool)) {
    // The owner's reference (the graph, the MemPool object), held until a release is seen.
    push(out, RequestOp::pool_create, pool);
    owned_[pool] = true;
    summary_.pools.push_back(pool);
  }
  push(out, RequestOp::pool_begin, pool, stream, 0);
  open_[pool] = Context{stream};
  after_entry(out);
}

MempoolId PoolRouter::pool_of_new_segment(std::uint64_t base, Bytes request, std::uint64_t stream) {
  if (auto known = final_pool_.find(base); known != final_pool_.end())
    return known->second;
  // Freed before the end: the first pool that could not have served the request from its
  // cache: the one this stream allocates to now, then the default pools, then the others.
  std::vector<MempoolId> candidates;
  for (const auto& [id, context] : open_)
    if (!context.stream || *context.stream == stream)
      candidates.push_back(id);
  candidates.push_back(MempoolId{});
  for (const MempoolId& id : model_.private_pools())
    if (owned_[id])
      candidates.push_back(id);
  for (const MempoolId& id : candidates)
    if (!model_.has_cached_block(id, request, StreamId{stream}))
      return id;
  // Every pool would have reused memory: a pool the final snapshot does not show. PyTorch
  // numbers graph pools (n,0) and MemPools (0,n); continue the numbering already seen.
  MempoolId next{1, 0};
  for (const MempoolId& id : summary_.pools) {
    if (id.first != 0)
      next = MempoolId{std::max(next.first, id.first + 1), 0};
  }
  std::set<MempoolId> known;
  for (const auto& [address, id] : final_pool_)
    known.insert(id);
  while (known.contains(next) || owned_.contains(next))
    ++next.first;
  return next;
}

bool PoolRouter::is_oom_path(const std::vector<TraceEvent>& trace, std::size_t first_free) const {
  // Frees inside a malloc (release_available_cached_blocks, the OOM retry) come right before
  // that malloc's new segment or its oom entry, and only when memory is capped.
  if (!settings_.capacity && !settings_.allowed_memory)
    return false;
  std::size_t i = first_free;
  while (i < trace.size() && trace[i].action == TraceAction::segment_free)
    ++i;
  return i < trace.size() &&
         (trace[i].action == TraceAction::segment_alloc || trace[i].action == TraceAction::oom);
}

void PoolRouter::before_entry(const std::vector<TraceEvent>& trace, std::size_t index,
                              RequestStream& out) {
  const TraceEvent& e = trace[index];
  switch (e.action) {
    case TraceAction::alloc: {
      MempoolId pool;
      if (index > 0 && trace[index - 1].action == TraceAction::segment_alloc &&
          inside(e.addr, trace[index - 1].addr, trace[index - 1].size)) {
        pool = pool_of_new_segment(trace[index - 1].addr, e.size, e.stream.value);
        live_segments_[trace[index - 1].addr] = {trace[index - 1].size, pool};
      } else {
        auto it = live_segments_.upper_bound(e.addr);
        if (it != live_segments_.begin() &&
            inside(e.addr, std::prev(it)->first, std::prev(it)->second.first))
          pool = std::prev(it)->second.second;
      }
      route(e.stream.value, pool, out);
      if (!pool.is_default())
        ++summary_.private_allocations;
      break;
    }
    case TraceAction::segment_alloc:
      if (!live_segments_.contains(e.addr))
        live_segments_[e.addr] = {e.size, MempoolId{}};
      break;
    case TraceAction::segment_free: {
      const bool burst_start = index == 0 || trace[index - 1].action != TraceAction::segment_free;
      if (burst_start && !is_oom_path(trace, index)) {
        // empty_cache: pools whose segments it returns were released before it; when it
        // returns default-pool segments no capture was underway.
        bool releases_default = false;
        std::vector<MempoolId> released;
        for (std::size_t i = index;
             i < trace.size() && trace[i].action == TraceAction::segment_free; ++i) {
          auto it = live_segments_.find(trace[i].addr);
          const MempoolId pool = it == live_segments_.end() ? MempoolId{} : it->second.second;
          if (pool.is_default())
            releases_default = true;
          else if (std::find(released.begin(), released.end(), pool) == released.end())
            released.push_back(pool);
        }
        for (const MempoolId& pool : released)
          end_context(pool, out);
        if (releases_default) {
          while (!open_.empty())
            end_context(open_.begin()->first, out);
        }
        for (const MempoolId& pool : released) {
          if (owned_[pool]) {
            push(out, RequestOp::pool_release, pool);
            owned_[pool] = false;
          }
        }
        Request r{};
        r.op = RequestOp::empty_cache;
        out.requests.push_back(r);
        ++summary_.empty_cache_requests;
      }
      live_segments_.erase(e.addr);
      break;
    }
    default:
      break;
  }
}

void PoolRouter::after_entry(const RequestStream& out) {
  while (applied_ < out.requests.size())
    apply(out.requests[applied_++], out);
}

void PoolRouter::apply(const Request& r, const RequestStream& stream) {
  const std::uint64_t tensor = r.tensor.value;
  switch (r.op) {
    case RequestOp::malloc: {
      alloc::MallocResult got = model_.malloc(r.size, r.stream);
      if (got.ok() && got.address != 0)
        address_of_[tensor] = got.address;
      break;
    }
    case RequestOp::free: {
      auto it = address_of_.find(tensor);
      if (it == address_of_.end())
        break;
      const std::uint64_t address = it->second;
      address_of_.erase(it);
      model_.free(address);
      if (model_.block_state(address) == BlockState::active_pending_free)
        pending_[tensor] = address;
      break;
    }
    case RequestOp::record_stream:
      if (auto it = address_of_.find(tensor); it != address_of_.end())
        model_.record_stream(it->second, r.stream);
      break;
    case RequestOp::events_ready:
      if (auto it = pending_.find(tensor); it != pending_.end()) {
        if (model_.block_state(it->second) == BlockState::active_pending_free)
          model_.mark_events_ready(it->second);
        pending_.erase(it);
      }
      break;
    case RequestOp::empty_cache:
      model_.empty_cache();
      break;
    case RequestOp::pool_create:
      model_.create_pool(stream.pools.at(r.pool).id);
      break;
    case RequestOp::pool_begin: {
      std::optional<StreamId> filter;
      if (r.size == 0)
        filter = r.stream;
      model_.begin_allocate_to_pool(stream.pools.at(r.pool).id, filter);
      break;
    }
    case RequestOp::pool_end:
      model_.end_allocate_to_pool(stream.pools.at(r.pool).id);
      break;
    case RequestOp::pool_release:
      model_.release_pool(stream.pools.at(r.pool).id);
      break;
    case RequestOp::pool_empty_cache:
      model_.empty_cache(stream.pools.at(r.pool).id);
      break;
    case RequestOp::step_begin:
    case RequestOp::reset_peak:
      break;
  }
}

}  // namespace fragscope::replay
