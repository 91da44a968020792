#pragma once
// Device sizes every layer shares, defined once.
#include "engine/core/units.h"

namespace fragscope {

// totalGlobalMem of the H200 the fixtures were recorded on (torch.cuda.get_device_properties): the
// default size of a simulated device when none is given (it sizes expandable-segment reservations
// and prints as "total capacity" in OOM text), and the H200-141GB experiment preset.
inline constexpr Bytes kH200TotalMemory = 150'109'880'320;

}  // namespace fragscope
