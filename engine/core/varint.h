#pragma once
// The one packed-integer encoding: LEB128 varints (7 bits a byte, low first, the high bit set on
// every byte but the last) and zigzag for signed values, so small steps either way take few
// bytes. The import's event spool (engine/snapshot/event_spool), packed requests
// (engine/core/packed_requests) and storage's blob formats (storage/db/packing.h: event chunks,
// timeline levels, keyframes) all write it; storage's ByteReader reads untrusted blobs with
// bounds checks, the spool and the packed requests their own bytes with get_varint.
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

// Reads a varint at `at` and moves past it, without bounds checks: only for bytes this process
// wrote itself (the spool's blocks, packed requests). Untrusted bytes go through a checked reader.
inline std::uint64_t get_varint(const std::uint8_t*& at) {
  std::uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    const std::uint8_t byte = *at++;
    value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0)
      return value;
  }
}

}  // namespace fragscope
