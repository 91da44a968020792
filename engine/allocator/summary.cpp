// PyTorch 2.11's memory texts. memory_summary follows torch/cuda/memory.py, whose Python
// formatting (floor division, "{:6d}", "{:<21}") is reproduced with integer arithmetic here.
#include "engine/allocator/summary.h"

#include <array>
#include <cstdio>

namespace fragscope::alloc {
namespace {

constexpr std::size_t kSummaryWidth = 75;  // between the two '|' of every line

// Python's `//` on ints rounds toward negative infinity.
std::int64_t floor_div(std::int64_t value, std::int64_t divisor) {
  const std::int64_t quotient = value / divisor;
  return (value % divisor != 0 && (value < 0) != (divisor < 0)) ? quotient - 1 : quotient;
}

std::string pad_left(std::string text, std::size_t width) {
  if (text.size() < width)
    text.insert(0, width - text.size(), ' ');
  return text;
}

std::string pad_right(std::string text, std::size_t width) {
  if (text.size() < width)
    text.append(width - text.size(), ' ');
  return text;
}

// Byte cells: the unit steps up while the reference (the "all" row's value in this column) is
// at least 768 KiB of the current unit; the shown value is floor-divided along with it.
std::string format_bytes_cell(std::int64_t value, std::int64_t reference) {
  static constexpr std::array<std::string_view, 6> kUnits{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::string_view unit = kUnits[0];
  double scaled_reference = static_cast<double>(reference);
  for (std::size_t i = 1; i < kUnits.size(); ++i) {
    if (scaled_reference < 768.0 * 1024.0)
      break;
    unit = kUnits[i];
    value = floor_div(value, 1024);
    scaled_reference /= 1024.0;
  }
  return pad_left(std::to_string(value), 6) + " " + std::string(unit);
}

// Count cells: " ", "K", "M" with a 750,000 threshold and division by 1000.
std::string format_count_cell(std::int64_t value, std::int64_t reference) {
  static constexpr std::array<std::string_view, 3> kUnits{" ", "K", "M"};
  std::string_view unit = kUnits[0];
  double scaled_reference = static_cast<double>(reference);
  for (std::size_t i = 1; i < kUnits.size(); ++i) {
    if (scaled_reference < 750.0 * 1000.0)
      break;
    unit = kUnits[i];
    value = floor_div(value, 1000);
    scaled_reference /= 1000.0;
  }
  return pad_left(std::to_string(value), 7) + " " + std::string(unit) + " ";
}

using CellFormatter = std::string (*)(std::int64_t, std::int64_t);

std::string metric_row(std::string_view name, const Stat& stat, const Stat& reference,
                       CellFormatter format) {
  // Appended piece by piece: `"literal" + temporary` trips GCC 12's -Wrestrict false positive
  // at -O3.
  std::string row = " ";
  row += pad_right(std::string(name), 21);
  row += " | ";
  row += format(stat.current, reference.current);
  row += " | ";
  row += format(stat.peak, reference.peak);
  row += " | ";
  row += format(stat.allocated, reference.allocated);
  row += " | ";
  row += format(stat.freed, reference.freed);
  row += " ";
  return row;
}

std::string two_decimals(double value) {
  std::array<char, 64> buffer{};
  const int length = std::snprintf(buffer.data(), buffer.size(), "%.2f", value);
  return std::string(buffer.data(), static_cast<std::size_t>(length));
}

}  // namespace

std::string memory_summary(const DeviceStats& stats, int device, bool abbreviated) {
  const std::string rule_equals(kSummaryWidth, '=');
  const std::string rule_dashes(kSummaryWidth, '-');
  std::vector<std::string> lines;
  lines.push_back(rule_equals);
  lines.push_back(std::string(18, ' ') + "PyTorch CUDA memory summary, device ID " +
                  pad_right(std::to_string(device), 17) + " ");
  lines.push_back(rule_dashes);
  lines.push_back(
      std::string(12, ' ') + "CUDA OOMs: " + pad_right(std::to_string(stats.num_ooms), 12) + " |" +
      std::string(8, ' ') +
      "cudaMalloc retries: " + pad_right(std::to_string(stats.num_alloc_retries), 8) + "  ");
  lines.push_back(rule_equals);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  struct Metric {
    const StatArray* stats;
    std::string_view name;
    CellFormatter format;
  };
  const std::array<Metric, 9> metrics{{
      {&stats.allocated_bytes, "Allocated memory", format_bytes_cell},
      {&stats.active_bytes, "Active memory", format_bytes_cell},
      {&stats.requested_bytes, "Requested memory", format_bytes_cell},
      {&stats.reserved_bytes, "GPU reserved memory", format_bytes_cell},
      {&stats.inactive_split_bytes, "Non-releasable memory", format_bytes_cell},
      {&stats.allocation, "Allocations", format_count_cell},
      {&stats.active, "Active allocs", format_count_cell},
      {&stats.segment, "GPU reserved segments", format_count_cell},
      {&stats.inactive_split, "Non-releasable allocs", format_count_cell},
  }};
  for (const Metric& metric : metrics) {
    const StatArray& array = *metric.stats;
    const Stat& all = array[StatType::aggregate];
    lines.push_back(rule_dashes);
    lines.push_back(metric_row(metric.name, all, all, metric.format));
    if (!abbreviated) {
      lines.push_back(
          metric_row("      from large pool", array[StatType::large_pool], all, metric.format));
      lines.push_back(
          metric_row("      from small pool", array[StatType::small_pool], all, metric.format));
    }
  }
  for (const auto& [stat, name] : {std::pair<const Stat*, std::string_view>{
                                       &stats.oversize_allocations, "Oversize allocations"},
                                   std::pair<const Stat*, std::string_view>{
                                       &stats.oversize_segments, "Oversize GPU segments"}}) {
    lines.push_back(rule_dashes);
    lines.push_back(metric_row(name, *stat, *stat, format_count_cell));
  }
  lines.push_back(rule_equals);

  std::string text;
  for (const std::string& line : lines)
    text += "|" + line + "|\n";
  return text;
}

std::string format_size(Bytes size) {
  if (size <= kKiB)
    return std::to_string(size) + " bytes";
  if (size <= kMiB)
    return two_decimals(static_cast<double>(size) / 1024.0) + " KiB";
  if (size <= kGiB)
    return two_decimals(static_cast<double>(size) / 1048576.0) + " MiB";
  return two_decimals(static_cast<double>(size) / 1073741824.0) + " GiB";
}

std::string process_memory_text(const OomMessageInputs& inputs) {
  std::string text;
  for (const GpuProcessMemory& process : inputs.processes) {
    if (process.is_this_process)
      text += "Including non-PyTorch memory, this process has " + format_size(process.used) +
              " memory in use. ";
    else
      text += "Process " + std::to_string(process.pid) + " has " + format_size(process.used) +
              " memory in use. ";
  }
  return text;
}

std::string oom_message(const OomMessageInputs& inputs) {
  const std::string process_info = process_memory_text(inputs);
  const std::string allowed_info =
      inputs.allowed ? format_size(*inputs.allowed) + " allowed; " : std::string();
  const std::string private_pool_info =
      inputs.private_pool_free > 0 ? "with " + format_size(inputs.private_pool_free) +
                                         " allocated in private pools (e.g., CUDA Graphs), "
                                   : std::string();
  const Bytes allocated_by_pytorch = inputs.allocated + inputs.private_pool_free;
  const Bytes reserved_unallocated = inputs.reserved - allocated_by_pytorch;  // size_t wrap, as c10

  return "CUDA out of memory. Tried to allocate " + format_size(inputs.tried_to_allocate) +
         ". GPU " + std::to_string(inputs.device) + " has a total capacity of " +
         format_size(inputs.total_capacity) + " of which " + format_size(inputs.device_free) +
         " is free. " + process_info + allowed_info + "Of the allocated memory " +
         format_size(allocated_by_pytorch) + " is allocated by PyTorch, " + private_pool_info +
         "and " + format_size(reserved_unallocated) +
         " is reserved by PyTorch but unallocated."
         " If reserved but unallocated memory is large try setting"
         " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See"
         " documentation for Memory Management "
         " (https://docs.pytorch.org/docs/stable/notes/"
         "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
}

std::string async_oom_message(const AsyncOomMessageInputs& inputs) {
  return "Allocation on device " + std::to_string(inputs.device) +
         " would exceed allowed memory. (out of memory)"
         "\nCurrently allocated     : " +
         format_size(inputs.currently_allocated) +
         "\nRequested               : " + format_size(inputs.requested) +
         "\nDevice limit            : " + format_size(inputs.device_total) +
         "\nFree (according to CUDA): " + format_size(inputs.device_free) +
         "\nPyTorch limit (set by user-supplied memory fraction)"
         "\n                        : " +
         format_size(inputs.pytorch_limit);
}

}  // namespace fragscope::alloc
