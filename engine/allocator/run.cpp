#include "engine/allocator/run.h"

#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "engine/allocator/flat_map.h"
#include "engine/allocator/request_sources.h"
#include "engine/core/packed_requests.h"

namespace fragscope::alloc {
namespace {

using detail::PlainRequests;
using detail::UnpackedBlocks;
using detail::WithEmptyCaches;

std::string where(std::size_t index) {
  return "request " + std::to_string(index) + ": ";
}

// The refusals of run_with's per-request checks, out of line: the checks stay small enough to
// be inlined into the request loop.
[[noreturn, gnu::cold, gnu::noinline]] void fail_reserved_tensor(std::size_t index) {
  throw InputError(where(index) + "tensor id 18446744073709551615 is reserved");
}
[[noreturn, gnu::cold, gnu::noinline]] void fail_not_allocated(std::size_t index,
                                                               std::uint64_t tensor) {
  throw InputError(where(index) + "tensor " + std::to_string(tensor) + " is not allocated");
}
[[noreturn, gnu::cold, gnu::noinline]] void fail_allocated_twice(std::size_t index,
                                                                 std::uint64_t tensor) {
  throw InputError(where(index) + "tensor " + std::to_string(tensor) + " is allocated twice");
}

// run_requests' bookkeeping per tensor: the block address of a live tensor, the tensors whose
// malloc failed (or had size 0), the live tensors with record_stream, and the freed tensors
// awaiting events with the address their block had. Two layouts with one interface:
//
// DenseTensors, for streams whose tensor ids are small (requests_from_trace numbers them 1, 2,
// ...): one array indexed by id, address and flags side by side, so the lookup every request
// makes is one load, not a hash probe.
// HashedTensors, for any ids: flat hash maps keyed by id + 1 (key 0 is their empty marker).
// Pending frees are rare (record_stream'ed tensors only), so both keep them in a hash map.
// prefetch(id) starts loading what a later request of `id` reads (a hint; changes nothing).
class DenseTensors {
 public:
  explicit DenseTensors(std::size_t ids) : slots_(ids) {}
  const std::uint64_t* live(std::uint64_t id) const {
    return slots_[id].flags & kLive ? &slots_[id].address : nullptr;
  }
  void set_live(std::uint64_t id, std::uint64_t address) {
    slots_[id].address = address;
    slots_[id].flags |= kLive;
  }
  void erase_live(std::uint64_t id) { slots_[id].flags &= static_cast<std::uint8_t>(~kLive); }
  bool failed(std::uint64_t id) const { return slots_[id].flags & kFailed; }
  void set_failed(std::uint64_t id) { slots_[id].flags |= kFailed; }
  bool used_elsewhere(std::uint64_t id) const { return slots_[id].flags & kUsedElsewhere; }
  void set_used_elsewhere(std::uint64_t id) { slots_[id].flags |= kUsedElsewhere; }
  bool take_used_elsewhere(std::uint64_t id) {
    const bool had = used_elsewhere(id);
    slots_[id].flags &= static_cast<std::uint8_t>(~kUsedElsewhere);
    return had;
  }
  void prefetch(std::uint64_t id) const { __builtin_prefetch(&slots_[id]); }
  FlatMap64<std::uint64_t>& pending() { return pending_; }
  static constexpr std::size_t kBytesPerId = 16;  // a slot

 private:
  static constexpr std::uint8_t kLive = 1;
  static constexpr std::uint8_t kFailed = 2;
  static constexpr std::uint8_t kUsedElsewhere = 4;
  struct Slot {
    std::uint64_t address = 0;
    std::uint8_t flags = 0;
  };
  static_assert(sizeof(Slot) == kBytesPerId);
  std::vector<Slot> slots_;
  FlatMap64<std::uint64_t> pending_;  // keyed by id + 1
};

class HashedTensors {
 public:
  const std::uint64_t* live(std::uint64_t id) const { return address_of_.find(id + 1); }
  void set_live(std::uint64_t id, std::uint64_t address) {
    address_of_.insert_or_assign(id + 1, address);
  }
  void erase_live(std::uint64_t id) { address_of_.erase(id + 1); }
  bool failed(std::uint64_t id) const { return failed_.contains(id + 1); }
  void set_failed(std::uint64_t id) { failed_.insert_or_assign(id + 1, true); }
  bool used_elsewhere(std::uint64_t id) const { return used_elsewhere_.contains(id + 1); }
  void set_used_elsewhere(std::uint64_t id) { used_elsewhere_.insert_or_assign(id + 1, true); }
  bool take_used_elsewhere(std::uint64_t id) { return used_elsewhere_.erase(id + 1); }
  void prefetch(std::uint64_t id) const { address_of_.prefetch(id + 1); }
  FlatMap64<std::uint64_t>& pending() { return pending_; }

 private:
  FlatMap64<std::uint64_t> address_of_;
  FlatMap64<bool> failed_;
  FlatMap64<bool> used_elsewhere_;
  FlatMap64<std::uint64_t> pending_;  // keyed by id + 1
};

// Tensor ids below this bound (ids seen + slack) get DenseTensors: a table at most a few times
// the size of the request list itself.
template <typename Requests>
std::optional<std::size_t> dense_tensor_ids(const Requests& requests, const RunOptions& options) {
  const std::size_t limit = 2 * requests.size() + 4096;
  std::uint64_t largest = requests.largest_tensor();
  for (const SeedSegment& segment : options.initial_segments)
    for (const SeedBlock& block : segment.blocks)
      largest = std::max(largest, block.tensor.value);
  if (largest >= limit)
    return std::nullopt;
  return static_cast<std::size_t>(largest) + 1;
}

// run_state_bytes of either stream form; `block` is what its decoded block holds.
template <typename Requests>
std::size_t state_bytes(const Requests& requests, const RunOptions& options, std::size_t block) {
  if (const auto ids = dense_tensor_ids(requests, options))
    return *ids * DenseTensors::kBytesPerId + block;
  // HashedTensors' address map (16-byte slots, at most half full) if every malloc stayed live.
  return requests.size() * 32 + block;
}

}  // namespace

namespace {

void run_pool_request(CachingAllocator& allocator, const std::vector<RequestPool>& pools,
                      const Request& r, const std::string& place) {
  if (r.pool >= pools.size())
    throw InputError(place + "pool index " + std::to_string(r.pool) + " is not in the stream");
  const RequestPool& pool = pools[r.pool];
  try {
    switch (r.op) {
      case RequestOp::pool_create:
        allocator.create_pool(pool.id, PoolOptions{pool.use_on_oom, pool.no_split, false});
        break;
      case RequestOp::pool_begin:
        allocator.begin_allocate_to_pool(
            pool.id, r.size == 1 ? std::nullopt : std::optional<StreamId>(r.stream));
        break;
      case RequestOp::pool_end:
        allocator.end_allocate_to_pool(pool.id);
        break;
      case RequestOp::pool_release:
        allocator.release_pool(pool.id);
        break;
      case RequestOp::pool_empty_cache:
        allocator.empty_cache(pool.id);
        break;
      default:
        break;
    }
  } catch (const PoolError& error) {
    throw InputError(place + error.what());
  }
}

}  // namespace

namespace {

// How many requests ahead run_with prefetches a request's tensor.
constexpr std::size_t kTensorAhead = 8;

template <typename Requests, typename Tensors>
void run_with(const Requests& requests, CachingAllocator& allocator, Tensors& tensors,
              const RunOptions& options, RunResult& result) {
  FlatMap64<std::uint64_t>& pending = tensors.pending();  // keyed by tensor id + 1
  // The request's tensor id; UINT64_MAX is refused (id + 1 keys the hash maps).
  auto tensor_of = [](const Request& r, std::size_t index) {
    if (r.tensor.value == UINT64_MAX) [[unlikely]]
      fail_reserved_tensor(index);
    return r.tensor.value;
  };

  auto live_address = [&](const Request& r, std::size_t index) -> std::optional<std::uint64_t> {
    tensor_of(r, index);
    if (const std::uint64_t* address = tensors.live(r.tensor.value)) [[likely]]
      return *address;
    if (!tensors.failed(r.tensor.value)) [[unlikely]]
      fail_not_allocated(index, r.tensor.value);
    ++result.skipped_requests;
    return std::nullopt;
  };

  if (!options.initial_segments.empty()) {
    const std::vector<std::uint64_t> seeded = allocator.seed(options.initial_segments);
    std::size_t index = 0;
    for (const SeedSegment& segment : options.initial_segments) {
      for (const SeedBlock& block : segment.blocks) {
        const std::uint64_t address = seeded[index++];
        if (block.state == BlockState::inactive)
          continue;
        if (block.tensor.value == UINT64_MAX)
          throw InputError("seeded block: tensor id 18446744073709551615 is reserved");
        const std::uint64_t key = block.tensor.value + 1;
        if (tensors.live(block.tensor.value) || pending.contains(key))
          throw InputError("seeded blocks share tensor " + std::to_string(block.tensor.value));
        if (block.state == BlockState::active_allocated)
          tensors.set_live(block.tensor.value, address);
        else
          pending.insert_or_assign(key, address);
      }
    }
  }

  if (options.initial_stats)
    allocator.restore_stats(*options.initial_stats);

  const std::size_t total = requests.size();
  std::optional<OutOfMemory> oom;  // a failing malloc's, moved into result.ooms
  // Each block of the requests in turn (a RequestStream is one); returns false once an OOM
  // stopped the run.
  auto run_block = [&](std::span<const Request> list, std::size_t first) {
    for (std::size_t at = 0; at < list.size(); ++at) {
      std::size_t index = first + at;
      if (index % kCancelPollRequests == 0) {
        options.progress.report(kRunStages[0].name, index, total);
        options.cancel.throw_if_cancelled();
      }
      if (at + kTensorAhead < list.size())
        tensors.prefetch(list[at + kTensorAhead].tensor.value);
      const Request& r = list[at];
      ++result.requests_run;
      switch (r.op) {
        case RequestOp::malloc: {
          const std::uint64_t tensor = tensor_of(r, index);
          if (tensors.live(tensor)) [[unlikely]]
            fail_allocated_twice(index, tensor);
          const std::uint64_t address = allocator.malloc(r.size, r.stream, oom);
          if (!oom) {
            ++result.allocs;
            if (address != 0)
              tensors.set_live(tensor, address);
            else
              tensors.set_failed(tensor);  // size 0: nothing to free later
          } else {
            tensors.set_failed(tensor);
            result.ooms.push_back(RequestOom{index, result.allocs, std::move(*oom)});
            oom.reset();
            if (options.stop_on_oom) {
              result.stopped_on_oom = true;
              index = total;  // leave the loop after the invariant check
            }
          }
          break;
        }
        case RequestOp::free: {
          if (auto address = live_address(r, index)) {
            allocator.free(*address);
            const std::uint64_t tensor = r.tensor.value;
            tensors.erase_live(tensor);
            if (tensors.take_used_elsewhere(tensor) &&
                allocator.block_state(*address) == BlockState::active_pending_free)
              pending.insert_or_assign(tensor + 1, *address);
          }
          break;
        }
        case RequestOp::record_stream: {
          if (auto address = live_address(r, index)) {
            allocator.record_stream(*address, r.stream);
            tensors.set_used_elsewhere(r.tensor.value);
          }
          break;
        }
        case RequestOp::events_ready: {
          // The tensor was freed already; its pending block is known by the address it had.
          const std::uint64_t key = tensor_of(r, index) + 1;
          if (const std::uint64_t* address = pending.find(key)) {
            // A free deferred during a capture may have completed already (its only other
            // stream was used inside the capture).
            if (allocator.block_state(*address) == BlockState::active_pending_free)
              allocator.mark_events_ready(*address);
            pending.erase(key);
          } else if (tensors.failed(r.tensor.value)) {
            ++result.skipped_requests;
          } else if (!tensors.used_elsewhere(r.tensor.value) && !tensors.live(r.tensor.value)) {
            // Freed without pending events (record_stream only named its own stream): nothing
            // to wait for.
          } else {
            throw InputError(where(index) + "events_ready for tensor " +
                             std::to_string(r.tensor.value) + " that is not freed");
          }
          break;
        }
        case RequestOp::empty_cache:
          allocator.empty_cache();
          break;
        case RequestOp::step_begin:
          break;
        case RequestOp::reset_peak:
          allocator.reset_peak_stats();
          break;
        case RequestOp::pool_create:
        case RequestOp::pool_begin:
        case RequestOp::pool_end:
        case RequestOp::pool_release:
        case RequestOp::pool_empty_cache:
          run_pool_request(allocator, requests.pools(), r, where(index));
          break;
      }
      const std::size_t every = options.check_invariants_every;
      if (every != 0 && (index % every == 0 || index + 1 >= total)) {
        std::string why;
        if (!allocator.is_valid(&why))
          throw std::logic_error(where(index) + "allocator invariant violated: " + why);
      }
      if (result.stopped_on_oom)
        return false;
    }
    return true;
  };
  requests.for_each_block(run_block);
  options.progress.report(kRunStages[0].name, total, total);
}

template <typename Requests>
RunResult run_all(const Requests& requests, const AllocatorConfig& config, Device& device,
                  EventSink* sink, const RunOptions& options) {
  const DeviceCallCounts calls_before = device.calls();
  CachingAllocator allocator(config, device, sink);
  allocator.set_profile(options.profile);
  if (options.allowed_memory)
    allocator.set_allowed_memory(options.allowed_memory);

  RunResult result;
  if (const auto ids = dense_tensor_ids(requests, options)) {
    DenseTensors tensors(*ids);
    run_with(requests, allocator, tensors, options, result);
  } else {
    HashedTensors tensors;
    run_with(requests, allocator, tensors, options, result);
  }
  result.stats = allocator.stats();
  result.allowed_memory = allocator.allowed_memory();
  result.gc_check_peak = allocator.gc_check_peak();
  if (options.keep_final_segments)
    result.final_segments = allocator.snapshot();
  result.peak_allocated =
      static_cast<Bytes>(result.stats.allocated_bytes[StatType::aggregate].peak);
  result.peak_reserved = static_cast<Bytes>(result.stats.reserved_bytes[StatType::aggregate].peak);
  result.device_calls = device.calls() - calls_before;
  return result;
}

// Calls use(source) with `base`, or with `base` and options.empty_cache_before's calls in it.
template <typename Base, typename Use>
auto with_source(const Base& base, const RunOptions& options, Use&& use) {
  const std::span<const std::size_t> before = options.empty_cache_before;
  if (before.empty())
    return use(base);
  if (!std::is_sorted(before.begin(), before.end()) || before.back() > base.size())
    throw std::invalid_argument(
        "RunOptions::empty_cache_before: indices must ascend and stay within the stream");
  return use(WithEmptyCaches<Base>(base, before));
}

}  // namespace

RunResult run_requests(const RequestStream& requests, const AllocatorConfig& config, Device& device,
                       EventSink* sink, const RunOptions& options) {
  return with_source(PlainRequests(requests), options, [&](const auto& source) {
    return run_all(source, config, device, sink, options);
  });
}

RunResult run_requests(const PackedRequests& requests, const AllocatorConfig& config,
                       Device& device, EventSink* sink, const RunOptions& options) {
  return with_source(UnpackedBlocks(requests), options, [&](const auto& source) {
    return run_all(source, config, device, sink, options);
  });
}

std::size_t run_state_bytes(const RequestStream& requests, const RunOptions& options) {
  return with_source(PlainRequests(requests), options,
                     [&](const auto& source) { return state_bytes(source, options, 0); });
}

std::size_t run_state_bytes(const PackedRequests& requests, const RunOptions& options) {
  const std::size_t block =
      std::min(requests.size(), PackedRequests::kBlockRequests) * sizeof(Request);
  return with_source(UnpackedBlocks(requests), options,
                     [&](const auto& source) { return state_bytes(source, options, block); });
}

}  // namespace fragscope::alloc
