#pragma once
// The one packed-integer encoding: LEB128 varints (7 bits a byte, low first, the high bit set on
// every byte but the last) and zigzag for signed values, so small steps either way take few
// bytes. Storage's blob formats (storage/db/packing.h: event chunks, timeline levels, keyframes)
// write it and read it back with bounds checks. The import's event spool
// (engine/snapshot/event_spool) and packed requests (engine/core/packed_requests), which only
// this process reads, trade a few bytes for fields read without a loop; they use zigzag.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fragscope {

inline constexpr std::size_t kMaxVarintBytes = 10;  // a 64-bit value

inline std::uint64_t zigzag(std::int64_t value) {
  return (static_cast<std::uint64_t>(value) << 1) ^ static_cast<std::uint64_t>(value >> 63);
}
inline std::int64_t unzigzag(std::uint64_t value) {
  return static_cast<std::int64_t>(value >> 1) ^ -static_cast<std::int64_t>(value & 1);
}

// Writes `value` at `at`, which has room for kMaxVarintBytes; returns the byte after it.
inline std::uint8_t* put_varint(std::uint8_t* at, std::uint64_t value) {
  while (value >= 0x80) {
    *at++ = static_cast<std::uint8_t>(value | 0x80);
    value >>= 7;
  }
  *at++ = static_cast<std::uint8_t>(value);
  return at;
}
inline void put_varint(std::vector<std::uint8_t>& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(value));
}

}  // namespace fragscope
