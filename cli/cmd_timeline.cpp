// fragscope-cli timeline: a run's memory over time, downsampled without losing peaks.
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "storage/db/data_location.h"
#include "storage/db/run_json.h"
#include "storage/db/run_store.h"

namespace fragscope::cli {
namespace {

constexpr std::uint64_t kDefaultBuckets = 200;
constexpr std::uint64_t kMaxBuckets = 1'000'000;

int run_timeline(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--db", "--run", "--buckets", "--json", "--first", "--end"});
  args.expect_positional(0, "no positional arguments");
  const auto run = args.uint_option("--run");
  if (!run)
    throw UsageError{"--run ID is required"};
  const std::uint64_t buckets = args.uint_option("--buckets").value_or(kDefaultBuckets);
  if (buckets == 0 || buckets > kMaxBuckets)
    throw UsageError{"--buckets must be between 1 and " + std::to_string(kMaxBuckets)};
  const std::string path = args.option_or("--db", storage::default_database_path());
  auto store = storage::open_run_store(path, storage::OpenMode::read_write, true);
  const storage::RunId id{static_cast<std::int64_t>(*run)};
  const storage::RunRecord record = store->run(id);
  const std::uint64_t first = args.uint_option("--first").value_or(0);
  const std::uint64_t end = args.uint_option("--end").value_or(record.event_count);
  if (end < first)
    throw UsageError{"--end must not be before --first"};
  const auto timeline = store->timeline(id, first, std::min(end, record.event_count),
                                        static_cast<std::size_t>(buckets));

  storage::SeriesPoint peak;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& bucket : timeline) {
    peak.allocated = std::max(peak.allocated, bucket.max.allocated);
    peak.reserved = std::max(peak.reserved, bucket.max.reserved);
    peak.active = std::max(peak.active, bucket.max.active);
    peak.requested = std::max(peak.requested, bucket.max.requested);
    rows.push_back(storage::to_json(bucket));
  }
  if (auto target = args.option("--json")) {
    write_json({{"run_id", id.value},
                {"events", record.event_count},
                {"peak_allocated", peak.allocated},
                {"peak_reserved", peak.reserved},
                {"peak_active", peak.active},
                {"peak_requested", peak.requested},
                {"buckets", rows}},
               *target);
    return 0;
  }
  std::cout << "run " << id.value << " (" << record.name << "): " << record.event_count
            << " events, peak allocated " << peak.allocated << " B, peak reserved " << peak.reserved
            << " B\n";
  std::cout << std::left << std::setw(22) << "EVENTS" << std::right << std::setw(18)
            << "ALLOCATED MAX" << std::setw(18) << "RESERVED MAX" << std::setw(18) << "ACTIVE MAX"
            << "\n";
  for (const auto& bucket : timeline) {
    std::cout << std::left << std::setw(22)
              << (std::to_string(bucket.first_event) + ".." + std::to_string(bucket.end_event))
              << std::right << std::setw(18) << bucket.max.allocated << std::setw(18)
              << bucket.max.reserved << std::setw(18) << bucket.max.active << "\n";
  }
  return 0;
}

}  // namespace

FRAGSCOPE_CLI_COMMAND({"timeline",
                       "timeline --run ID [--db FILE] [--buckets N] [--first EVENT] [--end EVENT] "
                       "[--json FILE|-]",
                       "A run's allocated/reserved/active bytes over its events, peak-preserving "
                       "max and min per bucket",
                       run_timeline});

}  // namespace fragscope::cli
