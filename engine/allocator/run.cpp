#include "engine/allocator/run.h"

#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace fragscope::alloc {
namespace {

std::string where(std::size_t index) {
  return "request " + std::to_string(index) + ": ";
}

}  // namespace

RunResult run_requests(const RequestStream& requests, const AllocatorConfig& config, Device& device,
                       EventSink* sink, const RunOptions& options) {
  const DeviceCallCounts calls_before = device.calls();
  CachingAllocator allocator(config, device, sink);
  if (options.allowed_memory)
    allocator.set_allowed_memory(options.allowed_memory);

  RunResult result;
  std::unordered_map<std::uint64_t, std::uint64_t> address_of;  // tensor id -> block address
  std::unordered_set<std::uint64_t> failed;                     // tensors whose malloc failed
  std::unordered_set<std::uint64_t> used_elsewhere;             // tensors with record_stream
  std::unordered_map<std::uint64_t, std::uint64_t> pending;     // freed, awaiting events
  address_of.reserve(1024);

  auto live_address = [&](const Request& r, std::size_t index) -> std::optional<std::uint64_t> {
    auto it = address_of.find(r.tensor.value);
    if (it != address_of.end())
      return it->second;
    if (failed.contains(r.tensor.value)) {
      ++result.skipped_requests;
      return std::nullopt;
    }
    throw InputError(where(index) + "tensor " + std::to_string(r.tensor.value) +
                     " is not allocated");
  };

  const auto& list = requests.requests;
  for (std::size_t index = 0; index < list.size(); ++index) {
    const Request& r = list[index];
    ++result.requests_run;
    switch (r.op) {
      case RequestOp::malloc: {
        if (address_of.contains(r.tensor.value))
          throw InputError(where(index) + "tensor " + std::to_string(r.tensor.value) +
                           " is allocated twice");
        MallocResult got = allocator.malloc(r.size, r.stream);
        if (got.ok()) {
          ++result.allocs;
          if (got.address != 0)
            address_of.emplace(r.tensor.value, got.address);
          else
            failed.insert(r.tensor.value);  // size 0: nothing to free later
        } else {
          failed.insert(r.tensor.value);
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
          address_of.erase(r.tensor.value);
          if (used_elsewhere.erase(r.tensor.value) != 0 &&
              allocator.block_state(*address) == BlockState::active_pending_free)
            pending[r.tensor.value] = *address;
        }
        break;
      }
      case RequestOp::record_stream: {
        if (auto address = live_address(r, index)) {
          allocator.record_stream(*address, r.stream);
          used_elsewhere.insert(r.tensor.value);
        }
        break;
      }
      case RequestOp::events_ready: {
        // The tensor was freed already; its pending block is known by the address it had.
        auto it = pending.find(r.tensor.value);
        if (it != pending.end()) {
          allocator.mark_events_ready(it->second);
          pending.erase(it);
        } else if (failed.contains(r.tensor.value)) {
          ++result.skipped_requests;
        } else if (!used_elsewhere.contains(r.tensor.value) &&
                   !address_of.contains(r.tensor.value)) {
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
    }
    const std::size_t every = options.check_invariants_every;
    if (every != 0 && (index % every == 0 || index + 1 >= list.size())) {
      std::string why;
      if (!allocator.is_valid(&why))
        throw std::logic_error(where(index) + "allocator invariant violated: " + why);
    }
  }
  result.stats = allocator.stats();
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
