#include "engine/allocator/device.h"

#include <stdexcept>
#include <string>

namespace fragscope::alloc {
namespace {

Bytes round_up(Bytes value, Bytes multiple) {
  return ((value + multiple - 1) / multiple) * multiple;
}

}  // namespace

std::optional<std::uint64_t> Device::allocate_segment(Bytes bytes) {
  auto address = do_allocate_segment(bytes);
  if (address)
    ++calls_.segment_allocs;
  else
    ++calls_.segment_alloc_failures;
  return address;
}

void Device::free_segment(std::uint64_t address, Bytes bytes) {
  ++calls_.segment_frees;
  do_free_segment(address, bytes);
}

std::optional<std::uint64_t> Device::reserve_address_space(Bytes bytes, Bytes alignment) {
  auto address = do_reserve_address_space(bytes, alignment);
  if (address)
    ++calls_.reserves;
  return address;
}

void Device::release_address_space(std::uint64_t address, Bytes bytes) {
  ++calls_.releases;
  do_release_address_space(address, bytes);
}

bool Device::map_pages(std::uint64_t address, Bytes bytes) {
  const bool mapped = do_map_pages(address, bytes);
  if (mapped)
    ++calls_.maps;
  else
    ++calls_.map_failures;
  return mapped;
}

void Device::unmap_pages(std::uint64_t address, Bytes bytes) {
  ++calls_.unmaps;
  do_unmap_pages(address, bytes);
}

// --- SimulatedDevice ---------------------------------------------------------------------------

SimulatedDevice::SimulatedDevice(Bytes capacity, Bytes total_memory)
    : capacity_(capacity), total_memory_(total_memory == 0 ? capacity : total_memory) {}

std::optional<std::uint64_t> SimulatedDevice::do_allocate_segment(Bytes bytes) {
  if (bytes == 0 || bytes > capacity_ - in_use_)
    return std::nullopt;
  const Bytes length = round_up(bytes, kGranule);
  // Top down, as cudaMalloc hands out addresses: the highest free range that fits gives its top
  // part; else the range grows downwards.
  std::uint64_t address = 0;
  auto fit = free_ranges_.end();
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it)
    if (it->second >= length)
      fit = it;
  if (fit != free_ranges_.end()) {
    const std::uint64_t base = fit->first;
    const Bytes left = fit->second - length;
    address = base + left;
    free_ranges_.erase(fit);
    if (left > 0)
      free_ranges_.emplace(base, left);
  } else {
    address = segment_bottom_ - length;
    segment_bottom_ = address;
  }
  in_use_ += bytes;
  return address;
}

void SimulatedDevice::do_free_segment(std::uint64_t address, Bytes bytes) {
  if (bytes > in_use_)
    throw std::logic_error("SimulatedDevice: free of " + std::to_string(bytes) +
                           " bytes with only " + std::to_string(in_use_) + " in use");
  in_use_ -= bytes;
  Bytes length = round_up(bytes, kGranule);
  std::uint64_t start = address;
  // Coalesce with the free neighbours on both sides, then with the unused space below.
  auto next = free_ranges_.lower_bound(start);
  if (next != free_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_ranges_.erase(prev);
    }
  }
  next = free_ranges_.lower_bound(start + length);
  if (next != free_ranges_.end() && next->first == start + length) {
    length += next->second;
    free_ranges_.erase(next);
  }
  if (start == segment_bottom_)
    segment_bottom_ = start + length;
  else
    free_ranges_.emplace(start, length);
}

std::optional<std::uint64_t> SimulatedDevice::do_reserve_address_space(Bytes bytes,
                                                                       Bytes alignment) {
  const std::uint64_t address = round_up(reserve_top_, alignment == 0 ? 1 : alignment);
  reserve_top_ = address + bytes;
  return address;
}

void SimulatedDevice::do_release_address_space(std::uint64_t, Bytes) {}

bool SimulatedDevice::do_map_pages(std::uint64_t, Bytes bytes) {
  if (bytes > capacity_ - in_use_)
    return false;
  in_use_ += bytes;
  return true;
}

void SimulatedDevice::do_unmap_pages(std::uint64_t, Bytes bytes) {
  if (bytes > in_use_)
    throw std::logic_error("SimulatedDevice: unmap of " + std::to_string(bytes) +
                           " bytes with only " + std::to_string(in_use_) + " mapped");
  in_use_ -= bytes;
}

// --- RecordedAddressDevice ---------------------------------------------------------------------

RecordedAddressDevice::RecordedAddressDevice(std::vector<RecordedSegment> segments,
                                             Device& upstream)
    : segments_(std::move(segments)), upstream_(upstream) {}

Bytes RecordedAddressDevice::free_memory() const {
  if (next_free_ < free_at_ooms_.size())
    return free_at_ooms_[next_free_++];
  return upstream_.free_memory();
}

std::optional<Bytes> RecordedAddressDevice::process_memory_in_use() const {
  return process_memory_ ? process_memory_ : upstream_.process_memory_in_use();
}

std::optional<std::uint64_t> RecordedAddressDevice::do_allocate_segment(Bytes bytes) {
  auto upstream_address = upstream_.allocate_segment(bytes);
  if (!upstream_address)
    return std::nullopt;
  std::uint64_t address = *upstream_address;
  if (!diverged_ && next_ < segments_.size() && segments_[next_].size == bytes &&
      !upstream_address_.contains(segments_[next_].address)) {
    address = segments_[next_++].address;
  } else {
    diverged_ = true;
  }
  upstream_address_[address] = *upstream_address;
  return address;
}

void RecordedAddressDevice::do_free_segment(std::uint64_t address, Bytes bytes) {
  auto it = upstream_address_.find(address);
  if (it == upstream_address_.end())
    throw std::logic_error("RecordedAddressDevice: free of unknown segment " +
                           std::to_string(address));
  upstream_.free_segment(it->second, bytes);
  upstream_address_.erase(it);
}

std::optional<std::uint64_t> RecordedAddressDevice::do_reserve_address_space(Bytes bytes,
                                                                             Bytes alignment) {
  return upstream_.reserve_address_space(bytes, alignment);
}

void RecordedAddressDevice::do_release_address_space(std::uint64_t address, Bytes bytes) {
  upstream_.release_address_space(address, bytes);
}

bool RecordedAddressDevice::do_map_pages(std::uint64_t address, Bytes bytes) {
  return upstream_.map_pages(address, bytes);
}

void RecordedAddressDevice::do_unmap_pages(std::uint64_t address, Bytes bytes) {
  upstream_.unmap_pages(address, bytes);
}

// --- ReplayDevice ------------------------------------------------------------------------------

ReplayDevice::ReplayDevice(std::vector<RecordedAddressDevice::RecordedSegment> segments,
                           Bytes capacity, Bytes total_memory, int ordinal)
    : simulated_(capacity, total_memory), recorded_(std::move(segments), simulated_) {
  recorded_.set_ordinal(ordinal);
}

}  // namespace fragscope::alloc
