#include "engine/allocator/run.h"

#include <stdexcept>
#include <string>

#include "engine/allocator/flat_map.h"

namespace fragscope::alloc {
namespace {

std::string where(std::size_t index) {
  return "request " + std::to_string(index) + ": ";
}

}  // namespace

namespace {

void run_pool_request(CachingAllocator& allocator, const RequestStream& requests, const Request& r,
                      const std::string& place) {
  if (r.pool >= requests.pools.size())
    throw InputError(place + "pool index " + std::to_string(r.pool) + " is not in the stream");
  const RequestPool& pool = requests.pools[r.pool];
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

RunResult run_requests(const RequestStream& requests, const AllocatorConfig& config, Device& device,
                       EventSink* sink, const RunOptions& options) {
  const DeviceCallCounts calls_before = device.calls();
  CachingAllocator allocator(config, device, sink);
  allocator.set_profile(options.profile);
  if (options.allowed_memory)
    allocator.set_allowed_memory(options.allowed_memory);

  RunResult result;
  // Keyed by tensor id + 1 (key 0 is the maps' empty marker).
  FlatMap64<std::uint64_t> address_of;  // live tensor -> block address
  FlatMap64<bool> failed;               // tensors whose malloc failed (or had size 0)
  FlatMap64<bool> used_elsewhere;       // live tensors with record_stream
  FlatMap64<std::uint64_t> pending;     // freed tensors awaiting events -> block address
  auto key_of = [](const Request& r, std::size_t index) {
    if (r.tensor.value == UINT64_MAX)
      throw InputError(where(index) + "tensor id 18446744073709551615 is reserved");
    return r.tensor.value + 1;
  };

  auto live_address = [&](const Request& r, std::size_t index) -> std::optional<std::uint64_t> {
    if (const std::uint64_t* address = address_of.find(key_of(r, index)))
      return *address;
    if (failed.contains(key_of(r, index))) {
      ++result.skipped_requests;
      return std::nullopt;
    }
    throw InputError(where(index) + "tensor " + std::to_string(r.tensor.value) +
                     " is not allocated");
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
        if (address_of.contains(key) || pending.contains(key))
          throw InputError("seeded blocks share tensor " + std::to_string(block.tensor.value));
        if (block.state == BlockState::active_allocated)
          address_of.insert_or_assign(key, address);
        else
          pending.insert_or_assign(key, address);
      }
    }
  }

  if (options.initial_stats)
    allocator.restore_stats(*options.initial_stats);

  const auto& list = requests.requests;
  for (std::size_t index = 0; index < list.size(); ++index) {
    if (index % kCancelPollRequests == 0) {
      options.progress.report(kRunStages[0].name, index, list.size());
      options.cancel.throw_if_cancelled();
    }
    const Request& r = list[index];
    ++result.requests_run;
    switch (r.op) {
      case RequestOp::malloc: {
        const std::uint64_t key = key_of(r, index);
        if (address_of.contains(key))
          throw InputError(where(index) + "tensor " + std::to_string(r.tensor.value) +
                           " is allocated twice");
        MallocResult got = allocator.malloc(r.size, r.stream);
        if (got.ok()) {
          ++result.allocs;
          if (got.address != 0)
            address_of.insert_or_assign(key, got.address);
          else
            failed.insert_or_assign(key, true);  // size 0: nothing to free later
        } else {
          failed.insert_or_assign(key, true);
          result.ooms.push_back(RequestOom{index, result.allocs, std::move(*got.oom)});
          if (options.stop_on_oom) {
            result.stopped_on_oom = true;
            index = list.size();  // leave the loop after the invariant check
          }
        }
        break;
      }
      case RequestOp::free: {
        if (auto address = live_address(r, index)) {
          allocator.free(*address);
          const std::uint64_t key = key_of(r, index);
          address_of.erase(key);
          if (used_elsewhere.erase(key) &&
              allocator.block_state(*address) == BlockState::active_pending_free)
            pending.insert_or_assign(key, *address);
        }
        break;
      }
      case RequestOp::record_stream: {
        if (auto address = live_address(r, index)) {
          allocator.record_stream(*address, r.stream);
          used_elsewhere.insert_or_assign(key_of(r, index), true);
        }
        break;
      }
      case RequestOp::events_ready: {
        // The tensor was freed already; its pending block is known by the address it had.
        const std::uint64_t key = key_of(r, index);
        if (const std::uint64_t* address = pending.find(key)) {
          // A free deferred during a capture may have completed already (its only other
          // stream was used inside the capture).
          if (allocator.block_state(*address) == BlockState::active_pending_free)
            allocator.mark_events_ready(*address);
          pending.erase(key);
        } else if (failed.contains(key)) {
          ++result.skipped_requests;
        } else if (!used_elsewhere.contains(key) && !address_of.contains(key)) {
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
        run_pool_request(allocator, requests, r, where(index));
        break;
    }
    const std::size_t every = options.check_invariants_every;
    if (every != 0 && (index % every == 0 || index + 1 >= list.size())) {
      std::string why;
      if (!allocator.is_valid(&why))
        throw std::logic_error(where(index) + "allocator invariant violated: " + why);
    }
  }
  options.progress.report(kRunStages[0].name, list.size(), list.size());
  result.stats = allocator.stats();
  if (options.keep_final_segments)
    result.final_segments = allocator.snapshot();
  result.peak_allocated =
      static_cast<Bytes>(result.stats.allocated_bytes[StatType::aggregate].peak);
  result.peak_reserved = static_cast<Bytes>(result.stats.reserved_bytes[StatType::aggregate].peak);
  const DeviceCallCounts& after = device.calls();
  result.device_calls =
      DeviceCallCounts{after.segment_allocs - calls_before.segment_allocs,
                       after.segment_alloc_failures - calls_before.segment_alloc_failures,
                       after.segment_frees - calls_before.segment_frees,
                       after.reserves - calls_before.reserves,
                       after.releases - calls_before.releases,
                       after.maps - calls_before.maps,
                       after.map_failures - calls_before.map_failures,
                       after.unmaps - calls_before.unmaps};
  return result;
}

}  // namespace fragscope::alloc
