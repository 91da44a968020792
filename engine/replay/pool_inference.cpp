#include "engine/replay/pool_inference.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "engine/core/packed_requests.h"

namespace fragscope::replay {
namespace {

bool inside(std::uint64_t address, std::uint64_t base, Bytes size) {
  return address >= base && address < base + size;
}

// Seeded segments have no segment_alloc entry: they are numbered from here, after any trace.
constexpr std::size_t kSeededIndex = std::size_t{1} << 48;

std::vector<alloc::RecordedAddressDevice::RecordedSegment> device_addresses(
    const PoolInferenceSettings& settings) {
  // The seeded (non-expandable) segments lead, as in the replay's own device.
  std::vector<alloc::RecordedAddressDevice::RecordedSegment> out;
  for (const alloc::SeedSegment& seed : settings.initial_segments)
    if (!seed.expandable)
      out.push_back({seed.address, seed.size});
  out.insert(out.end(), settings.recorded_segments.begin(), settings.recorded_segments.end());
  return out;
}

}  // namespace

PoolRouter::PoolRouter(PoolInferenceSettings settings)
    : settings_(std::move(settings)),
      gpu_(device_addresses(settings_), settings_.capacity.value_or(alloc::kUnlimited),
           settings_.total_memory),
      calls_at_start_(gpu_.device().calls()),
      model_(settings_.config, gpu_.device(), &recorder_) {
  model_.set_profile(settings_.profile);
  if (settings_.allowed_memory)
    model_.set_allowed_memory(settings_.allowed_memory);
}

void PoolRouter::seed(const snapshot::TraceWindow& trace, std::vector<alloc::SeedSegment>& seeds,
                      RequestStream& out) {
  if (trace_ != &trace)
    prepare(trace);
  if (seeds.empty())
    return;
  // Final segments the trace never returns or reopens were there all along, in that pool.
  std::set<std::uint64_t> touched;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const TraceEvent& e = trace[i];
    if (e.action == TraceAction::segment_alloc || e.action == TraceAction::segment_free)
      touched.insert(e.addr);
  }
  std::map<std::uint64_t, const SegmentPool*> untouched_final;
  for (const SegmentPool& segment : settings_.final_segments)
    if (!touched.contains(segment.address))
      untouched_final[segment.address] = &segment;
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    alloc::SeedSegment& seed = seeds[k];
    if (seed.expandable)
      continue;
    const std::size_t index = kSeededIndex + k;
    if (auto it = untouched_final.find(seed.address);
        it != untouched_final.end() && it->second->size == seed.size) {
      final_pool_[index] = it->second->pool;
      seed.pool_id = it->second->pool;
    } else if (auto hint = settings_.hints.segment_pool.find(index);
               hint != settings_.hints.segment_pool.end()) {
      seed.pool_id = hint->second;
    }
  }
  const std::vector<std::uint64_t> addresses = model_.seed(seeds);
  std::size_t at = 0;
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    const alloc::SeedSegment& seed = seeds[k];
    std::size_t active = 0;
    for (const alloc::SeedBlock& block : seed.blocks) {
      const std::uint64_t address = addresses[at++];
      if (block.state == BlockState::active_allocated) {
        address_of_.insert_or_assign(block.tensor.value + 1, address);
        ++active;
      } else if (block.state == BlockState::active_pending_free) {
        pending_.insert_or_assign(block.tensor.value + 1, address);
      }
    }
    if (!seed.pool_id.is_default() && !owned_.contains(seed.pool_id)) {
      // The seed made the pool with its owner's reference, released when the trace frees it.
      owned_[seed.pool_id] = true;
      out.pool_index(seed.pool_id);
      summary_.pools.push_back(seed.pool_id);
    }
    if (seed.expandable)
      continue;
    live_segments_.assign(seed.address, LiveSegment{seed.size, seed.pool_id, kSeededIndex + k,
                                                    seed.stream.value, active});
  }
}

PoolRouter::~PoolRouter() = default;

// --- what the pass knows and learns -------------------------------------------------------------

bool PoolRouter::known(std::size_t segment_index) const {
  return final_pool_.contains(segment_index) ||
         settings_.hints.segment_pool.contains(segment_index);
}

MempoolId PoolRouter::invented_pool(std::uint64_t stream) const {
  // A capture cannot run on the legacy default stream: a pool used there is a MemPool, which
  // PyTorch 2.11 numbers (0,n); graph pools are (n,0). One made-up pool per family.
  const bool mem_pool = stream == 0;
  for (const PoolHints* hints : {revised_ ? &*revised_ : nullptr, &settings_.hints}) {
    if (!hints)
      continue;
    for (const auto& [index, id] : hints->segment_pool)
      if ((id.first == 0) == mem_pool)
        return id;
  }
  std::set<MempoolId> used;
  for (const SegmentPool& segment : settings_.final_segments)
    used.insert(segment.pool);
  MempoolId id = mem_pool ? MempoolId{0, 1} : MempoolId{1, 0};
  while (used.contains(id)) {
    if (mem_pool)
      ++id.second;
    else
      ++id.first;
  }
  return id;
}

void PoolRouter::learn_private(std::size_t segment_index, std::uint64_t stream) {
  if (known(segment_index))
    return;
  if (!revised_)
    revised_ = settings_.hints;
  if (!revised_->segment_pool.contains(segment_index))
    revised_->segment_pool[segment_index] = invented_pool(stream);
}

void PoolRouter::learn_no_split(MempoolId pool) {
  if (!revised_)
    revised_ = settings_.hints;
  revised_->no_split.insert(pool);
}

std::uint64_t PoolRouter::segment_base(std::uint64_t address) const {
  std::uint64_t base = 0;
  live_segments_.holding(address, base);
  return base;
}

PoolRouter::LiveSegment* PoolRouter::LiveSegments::find(std::uint64_t base) {
  if (in_map_) {
    const auto found = many_.find(base);
    return found == many_.end() ? nullptr : &found->second;
  }
  const auto it = std::lower_bound(bases_.begin(), bases_.end(), base);
  if (it == bases_.end() || *it != base)
    return nullptr;
  return &segments_[static_cast<std::size_t>(it - bases_.begin())];
}

PoolRouter::LiveSegment& PoolRouter::LiveSegments::at(std::uint64_t base) {
  if (LiveSegment* segment = find(base))
    return *segment;
  throw std::out_of_range("PoolRouter: no live segment at the base");
}

void PoolRouter::LiveSegments::assign(std::uint64_t base, const LiveSegment& segment) {
  if (!in_map_ && bases_.size() == kMaxSorted && find(base) == nullptr) {
    for (std::size_t k = 0; k < bases_.size(); ++k)
      many_.emplace_hint(many_.end(), bases_[k], segments_[k]);
    bases_ = {};
    segments_ = {};
    in_map_ = true;
  }
  if (in_map_) {
    many_.insert_or_assign(base, segment);
    return;
  }
  const auto it = std::lower_bound(bases_.begin(), bases_.end(), base);
  const auto at = it - bases_.begin();
  if (it != bases_.end() && *it == base) {
    segments_[static_cast<std::size_t>(at)] = segment;
    return;
  }
  bases_.insert(it, base);
  segments_.insert(segments_.begin() + at, segment);
}

void PoolRouter::LiveSegments::erase(std::uint64_t base) {
  if (in_map_) {
    many_.erase(base);
    return;
  }
  const auto it = std::lower_bound(bases_.begin(), bases_.end(), base);
  if (it == bases_.end() || *it != base)
    return;
  segments_.erase(segments_.begin() + (it - bases_.begin()));
  bases_.erase(it);
}

const PoolRouter::LiveSegment* PoolRouter::LiveSegments::holding(std::uint64_t address,
                                                                 std::uint64_t& base) const {
  base = 0;
  if (in_map_) {
    auto it = many_.upper_bound(address);
    if (it == many_.begin())
      return nullptr;
    --it;
    if (it->first == 0 || !inside(address, it->first, it->second.size))
      return nullptr;
    base = it->first;
    return &it->second;
  }
  if (bases_.empty())
    return nullptr;
  // The last segment whose base is not above the address: a binary search without branches
  // on the bases (a branch a step was mispredicted half the time).
  const std::uint64_t* first = bases_.data();
  for (std::size_t count = bases_.size(); count > 1;) {
    const std::size_t half = count / 2;
    first = first[half] <= address ? first + half : first;
    count -= half;
  }
  const auto at = static_cast<std::size_t>(first - bases_.data());
  if (bases_[at] == 0 || !inside(address, bases_[at], segments_[at].size))
    return nullptr;
  base = bases_[at];
  return &segments_[at];
}

// --- requests -----------------------------------------------------------------------------------

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
    std::vector<MempoolId> all_streams;
    for (const auto& [id, context] : open_)
      if (!context.stream)
        all_streams.push_back(id);
    for (const MempoolId& id : all_streams)
      end_context(id, out);
    push(out, RequestOp::pool_begin, pool, stream, 1);
    open_[pool] = Context{std::nullopt};
    after_entry(out);
    return;
  }
  if (!owned_.contains(pool)) {
    // The owner's reference (the graph, the MemPool object), held until a release is seen.
    push(out, RequestOp::pool_create, pool);
    out.pools[out.requests.back().pool].no_split = settings_.hints.no_split.contains(pool);
    owned_[pool] = true;
    summary_.pools.push_back(pool);
  }
  push(out, RequestOp::pool_begin, pool, stream, 0);
  open_[pool] = Context{stream};
  after_entry(out);
}

MempoolId PoolRouter::pool_of_new_segment(std::size_t index, Bytes request, std::uint64_t stream) {
  std::optional<MempoolId> decided;
  if (auto it = final_pool_.find(index); it != final_pool_.end())
    decided = it->second;
  else if (auto hint = settings_.hints.segment_pool.find(index);
           hint != settings_.hints.segment_pool.end())
    decided = hint->second;
  if (decided) {
    // The recording opened a segment, so that pool had no block for the request: a block the
    // model would take instead sits in a segment of another pool, or the pool never splits.
    if (auto block = model_.cached_block(*decided, request, StreamId{stream})) {
      if (const std::uint64_t base = segment_base(*block); base != 0) {
        const LiveSegment& other = live_segments_.at(base);
        if (!known(other.index))
          learn_private(other.index, other.stream);
        else if (!decided->is_default() && !split_seen_.contains(*decided))
          learn_no_split(*decided);
      }
    }
    return *decided;
  }
  // Freed before the end: the first pool that could not have served the request from its
  // cache: the one this stream allocates to now, then the default pools, then the others.
  std::vector<MempoolId> candidates;
  for (const auto& [id, context] : open_)
    if (!context.stream || *context.stream == stream)
      candidates.push_back(id);
  // A side stream that joined a capture (it waited on the capturing stream) allocates from the
  // capture's pool too; the legacy default stream cannot join one.
  if (stream != 0) {
    for (const auto& [id, context] : open_)
      if (context.stream && *context.stream != 0 && *context.stream != stream)
        candidates.push_back(id);
  }
  candidates.push_back(MempoolId{});
  for (const MempoolId& id : model_.private_pools())
    if (owned_[id] && std::find(candidates.begin(), candidates.end(), id) == candidates.end())
      candidates.push_back(id);
  for (const MempoolId& id : candidates)
    if (!model_.cached_block(id, request, StreamId{stream}))
      return id;
  // A private pool that never split a block would have had nothing to offer: no_split.
  for (const MempoolId& id : candidates) {
    if (!id.is_default() && !split_seen_.contains(id) && !settings_.hints.no_split.contains(id)) {
      learn_no_split(id);
      return id;
    }
  }
  // Every pool would have reused memory: a pool nothing else shows.
  return invented_pool(stream);
}

bool PoolRouter::is_oom_path(const snapshot::TraceWindow& trace, std::size_t first_free) const {
  return segment_frees_inside_malloc(
      trace, first_free, settings_.capacity.has_value() || settings_.allowed_memory.has_value());
}

namespace {

// The final snapshot's pools belong to the segments alive at the end: the last segment_alloc
// at each address, with no segment_free after it. Appends the segment_alloc entries to
// `recorded` when given.
std::map<std::size_t, MempoolId> final_pools_of(
    const snapshot::TraceWindow& trace, const std::vector<SegmentPool>& final_segments,
    std::vector<alloc::RecordedAddressDevice::RecordedSegment>* recorded) {
  struct Opened {
    std::size_t index;
    Bytes size;
  };
  std::map<std::uint64_t, Opened> last_alloc;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const TraceEvent& e = trace[i];
    if (e.action == TraceAction::segment_alloc) {
      last_alloc[e.addr] = Opened{i, e.size};
      if (recorded)
        recorded->push_back({e.addr, e.size});
    } else if (e.action == TraceAction::segment_free) {
      last_alloc.erase(e.addr);
    }
  }
  std::map<std::size_t, MempoolId> pools;
  for (const SegmentPool& segment : final_segments) {
    auto it = last_alloc.find(segment.address);
    if (it != last_alloc.end() && it->second.size == segment.size)
      pools[it->second.index] = segment.pool;
  }
  return pools;
}

}  // namespace

void find_trace_segments(const snapshot::TraceWindow& trace, PoolInferenceSettings& settings) {
  settings.recorded_segments.clear();
  settings.final_pools =
      final_pools_of(trace, settings.final_segments, &settings.recorded_segments);
}

void PoolRouter::prepare(const snapshot::TraceWindow& trace) {
  trace_ = &trace;
  const std::map<std::size_t, MempoolId> pools =
      settings_.final_pools ? *settings_.final_pools
                            : final_pools_of(trace, settings_.final_segments, nullptr);
  for (const auto& [index, pool] : pools)
    final_pool_[index] = pool;
}

void PoolRouter::before_entry(const snapshot::TraceWindow& trace, std::size_t index,
                              RequestStream& out) {
  if (trace_ != &trace)
    prepare(trace);
  // A copy: looking back and ahead may decode other blocks of a spooled trace.
  const TraceEvent e = trace[index];
  expected_address_.reset();
  switch (e.action) {
    case TraceAction::alloc: {
      MempoolId pool;
      std::uint64_t base = 0;
      // Stays valid: nothing below opens or returns a segment.
      LiveSegment* const segment = live_segments_.holding(e.addr, base);
      if (index > 0 && trace[index - 1].action == TraceAction::segment_alloc &&
          trace[index - 1].addr == base) {
        pool = pool_of_new_segment(index - 1, e.size, e.stream.value);
        live_segments_.at(base).pool = pool;
      } else if (segment != nullptr) {
        pool = segment->pool;
        if (e.addr != base || segment->live_allocs > 0)
          split_seen_.insert(pool);
      }
      if (segment != nullptr)
        ++segment->live_allocs;
      route(e.stream.value, pool, out);
      if (!pool.is_default())
        ++summary_.private_allocations;
      expected_address_ = e.addr;
      break;
    }
    case TraceAction::free_requested:
      if (std::uint64_t base = 0; LiveSegment* segment = live_segments_.holding(e.addr, base)) {
        if (segment->live_allocs > 0)
          --segment->live_allocs;
      }
      break;
    case TraceAction::free_completed:
      // A free completed by a malloc's event processing: no capture was underway then.
      if (index == 0 || trace[index - 1].action != TraceAction::free_requested ||
          trace[index - 1].addr != e.addr) {
        while (!open_.empty())
          end_context(open_.begin()->first, out);
      }
      break;
    case TraceAction::oom: {
      // A pool with a block for the request would have served it.
      MempoolId pool;
      for (const auto& [id, context] : open_)
        if (!context.stream || *context.stream == e.stream.value)
          pool = id;
      if (auto block = model_.cached_block(pool, e.size, e.stream)) {
        if (const std::uint64_t base = segment_base(*block); base != 0)
          learn_private(live_segments_.at(base).index, live_segments_.at(base).stream);
      }
      break;
    }
    case TraceAction::segment_alloc:
      live_segments_.assign(e.addr, LiveSegment{e.size, MempoolId{}, index, e.stream.value, 0});
      break;
    case TraceAction::segment_free: {
      const bool burst_start = index == 0 || trace[index - 1].action != TraceAction::segment_free;
      if (burst_start && !is_oom_path(trace, index))
        infer_empty_cache(trace, index, out);
      if (const LiveSegment* segment = live_segments_.find(e.addr))
        freed_segments_[e.addr] = *segment;
      live_segments_.erase(e.addr);
      break;
    }
    default:
      break;
  }
}

void PoolRouter::infer_empty_cache(const snapshot::TraceWindow& trace, std::size_t index,
                                   RequestStream& out) {
  // Pools whose segments it returns were released before it; when it returns default-pool
  // segments no capture was underway.
  bool releases_default = false;
  std::vector<MempoolId> released;
  burst_.clear();
  burst_order_.clear();
  for (std::size_t i = index; i < trace.size() && trace[i].action == TraceAction::segment_free;
       ++i) {
    burst_.insert(trace[i].addr);
    burst_order_.push_back(trace[i].addr);
    const LiveSegment* segment = live_segments_.find(trace[i].addr);
    const MempoolId pool = segment == nullptr ? MempoolId{} : segment->pool;
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
  if (releases_default) {
    Request r{};
    r.op = RequestOp::empty_cache;
    out.requests.push_back(r);
  } else {
    // Only private pools gave memory back: that pool's own empty_cache (MemPool's destructor).
    for (const MempoolId& pool : released)
      push(out, RequestOp::pool_empty_cache, pool);
  }
  ++summary_.empty_cache_requests;
}

// --- the lockstep model -------------------------------------------------------------------------

void PoolRouter::check_malloc(std::uint64_t model_address) {
  // The model took another block than the recording: one of the two segments is in another pool
  // than assumed (or the pool never splits).
  const std::uint64_t recorded = segment_base(*expected_address_);
  const std::uint64_t taken = segment_base(model_address);
  if (taken != 0 && !known(live_segments_.at(taken).index)) {
    learn_private(live_segments_.at(taken).index, live_segments_.at(taken).stream);
  } else if (recorded != 0 && !known(live_segments_.at(recorded).index)) {
    learn_private(live_segments_.at(recorded).index, live_segments_.at(recorded).stream);
  } else if (recorded != 0) {
    const MempoolId pool = live_segments_.at(recorded).pool;
    if (!pool.is_default() && !split_seen_.contains(pool) &&
        !settings_.hints.no_split.contains(pool))
      learn_no_split(pool);
  }
}

void PoolRouter::check_empty_cache() {
  // The model returned a segment the recording kept: the recorded ones were a private pool's.
  bool extra = false;
  std::vector<std::uint64_t> returned;
  for (const TraceEvent& e : recorder_.events) {
    if (e.action != TraceAction::segment_free)
      continue;
    returned.push_back(e.addr);
    if (!burst_.contains(e.addr))
      extra = true;
  }
  // The same segments in another order: the default pools return large before small, so a
  // recording that returned them otherwise returned a private pool's (a trace that starts
  // mid-run shows nothing else of that pool).
  const bool reordered =
      !extra && returned.size() == burst_order_.size() && returned != burst_order_;
  if (extra || reordered) {
    for (std::uint64_t address : burst_) {
      if (const LiveSegment* segment = live_segments_.find(address))
        learn_private(segment->index, segment->stream);
    }
    return;
  }
  // One call returns the default pools' segments before any private pool's: a segment returned
  // after a private pool's one is private too.
  bool after_private = false;
  for (std::uint64_t address : burst_order_) {
    const LiveSegment* segment = nullptr;
    if (const LiveSegment* live = live_segments_.find(address))
      segment = live;
    else if (auto freed = freed_segments_.find(address); freed != freed_segments_.end())
      segment = &freed->second;
    if (!segment)
      continue;
    if (!segment->pool.is_default())
      after_private = true;
    else if (after_private)
      learn_private(segment->index, segment->stream);
  }
}

void PoolRouter::after_entry(const RequestStream& out) {
  while (applied_ < out.requests.size())
    apply(out.requests[applied_++], out);
}

void PoolRouter::move_applied(RequestStream& out, PackedRequests& into) {
  after_entry(out);
  for (const Request& r : out.requests)
    into.push_back(r);
  out.requests.clear();
  applied_ = 0;
}

template <typename EmptyCache>
void PoolRouter::record_empty_cache(EmptyCache&& empty_cache) {
  recorder_.events.clear();
  recorder_.recording = true;
  empty_cache();
  recorder_.recording = false;
  check_empty_cache();
}

void PoolRouter::apply(const Request& r, const RequestStream& stream) {
  const std::uint64_t tensor = r.tensor.value;
  ++requests_run_;
  // A request of a tensor whose malloc gave no block: run_requests skips it and counts it.
  auto skip = [&] {
    if (without_block_.size() != 0 && without_block_.contains(tensor + 1))
      ++skipped_requests_;
  };
  switch (r.op) {
    case RequestOp::malloc: {
      const std::uint64_t address = model_.malloc(r.size, r.stream, oom_);
      const bool ok = !oom_.has_value();
      oom_.reset();
      malloc_failed_ = malloc_failed_ || !ok;
      if (ok)
        ++allocs_;
      if (ok && address != 0)
        address_of_.insert_or_assign(tensor + 1, address);
      else if (ok)
        without_block_.insert_or_assign(tensor + 1, true);
      if (ok && expected_address_ && address != *expected_address_)
        check_malloc(address);
      expected_address_.reset();
      break;
    }
    case RequestOp::free: {
      const std::uint64_t* found = address_of_.find(tensor + 1);
      if (found == nullptr) {
        skip();
        break;
      }
      const std::uint64_t address = *found;
      address_of_.erase(tensor + 1);
      model_.free(address);
      if (model_.block_state(address) == BlockState::active_pending_free)
        pending_.insert_or_assign(tensor + 1, address);
      break;
    }
    case RequestOp::record_stream:
      if (const std::uint64_t* address = address_of_.find(tensor + 1))
        model_.record_stream(*address, r.stream);
      else
        skip();
      break;
    case RequestOp::events_ready:
      if (const std::uint64_t* found = pending_.find(tensor + 1)) {
        const std::uint64_t address = *found;
        if (model_.block_state(address) == BlockState::active_pending_free)
          model_.mark_events_ready(address);
        pending_.erase(tensor + 1);
      } else {
        skip();
      }
      break;
    case RequestOp::empty_cache: {
      record_empty_cache([&] { model_.empty_cache(); });
      break;
    }
    case RequestOp::pool_create: {
      const RequestPool& pool = stream.pools.at(r.pool);
      model_.create_pool(pool.id, alloc::PoolOptions{pool.use_on_oom, pool.no_split, false});
      break;
    }
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
    case RequestOp::pool_empty_cache: {
      record_empty_cache([&] { model_.empty_cache(stream.pools.at(r.pool).id); });
      break;
    }
    case RequestOp::step_begin:
    case RequestOp::reset_peak:
      break;
  }
}

std::optional<alloc::RunResult> PoolRouter::run_result(bool keep_final_segments) const {
  if (malloc_failed_)
    return std::nullopt;
  alloc::RunResult result;
  result.requests_run = requests_run_;
  result.allocs = allocs_;
  result.skipped_requests = skipped_requests_;
  result.stats = model_.stats();
  result.allowed_memory = model_.allowed_memory();
  result.gc_check_peak = model_.gc_check_peak();
  if (keep_final_segments)
    result.final_segments = model_.snapshot();
  result.peak_allocated =
      static_cast<Bytes>(result.stats.allocated_bytes[alloc::StatType::aggregate].peak);
  result.peak_reserved =
      static_cast<Bytes>(result.stats.reserved_bytes[alloc::StatType::aggregate].peak);
  result.device_calls = gpu_.device().calls() - calls_at_start_;
  return result;
}

bool segment_frees_inside_malloc(const snapshot::TraceWindow& trace, std::size_t first_free,
                                 bool memory_capped) {
  // Frees inside a malloc (release_available_cached_blocks, the OOM retry) come right before
  // that malloc's new segment or its oom entry, and only when memory is capped.
  if (!memory_capped)
    return false;
  std::size_t i = first_free;
  while (i < trace.size() && trace[i].action == TraceAction::segment_free)
    ++i;
  return i < trace.size() &&
         (trace[i].action == TraceAction::segment_alloc || trace[i].action == TraceAction::oom);
}

}  // namespace fragscope::replay
