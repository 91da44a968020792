#pragma once
// Byte units and literals shared by every layer: `20_MiB` reads like the PyTorch docs.
#include <cstdint>

namespace fragscope {

using Bytes = std::uint64_t;

inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;
inline constexpr Bytes kTiB = 1024 * kGiB;

namespace literals {
constexpr Bytes operator""_B(unsigned long long v) {
  return v;
}
constexpr Bytes operator""_KiB(unsigned long long v) {
  return v * kKiB;
}
constexpr Bytes operator""_MiB(unsigned long long v) {
  return v * kMiB;
}
constexpr Bytes operator""_GiB(unsigned long long v) {
  return v * kGiB;
}
}  // namespace literals

}  // namespace fragscope
