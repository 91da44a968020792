#pragma once
// Byte counts as PyTorch's C++ format_size prints them in the OOM text (torch-allocator-spec
// §6.1), so a post-mortem reads exactly like the exception the user saw.
#include <string>

#include "engine/core/units.h"

namespace fragscope::analysis {

// "0 bytes", "1024 bytes", "1.50 KiB", "168.00 MiB", "1024.00 GiB" (two decimals, no TiB).
std::string format_size(Bytes size);

}  // namespace fragscope::analysis
