#pragma once
// Addresses in messages: "0x7f0000000000", lower-case hex as PyTorch prints them.
#include <charconv>
#include <cstdint>
#include <string>

namespace fragscope {

inline std::string hex_address(std::uint64_t address) {
  char digits[16];
  const auto end = std::to_chars(digits, digits + sizeof digits, address, 16).ptr;
  return "0x" + std::string(digits, end);
}

}  // namespace fragscope
