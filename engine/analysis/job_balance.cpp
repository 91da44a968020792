#include "engine/analysis/job_balance.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/allocator/summary.h"
#include "engine/core/error.h"

namespace fragscope::analysis {
namespace {

// True when `a` should be looked at before `b`.
bool worse(const RankMemory& a, const RankMemory& b) {
  if (a.oom != b.oom)
    return a.oom;
  if (a.peak_reserved != b.peak_reserved)
    return a.peak_reserved > b.peak_reserved;
  if (a.peak_allocated != b.peak_allocated)
    return a.peak_allocated > b.peak_allocated;
  return a.rank < b.rank;
}

double max_over_mean(const std::vector<RankMemory>& ranks, Bytes RankMemory::*field) {
  if (ranks.empty())
    return 0;
  double sum = 0;
  Bytes highest = 0;
  for (const RankMemory& r : ranks) {
    sum += static_cast<double>(r.*field);
    highest = std::max(highest, r.*field);
  }
  const double mean = sum / static_cast<double>(ranks.size());
  return mean > 0 ? static_cast<double>(highest) / mean : 0;
}

std::string percent(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %%", ratio * 100.0);
  return text;
}

}  // namespace

double RankMemory::fragmentation() const {
  if (peak_reserved == 0)
    return 0;
  const Bytes active = std::min(peak_active, peak_reserved);
  return 1.0 - static_cast<double>(active) / static_cast<double>(peak_reserved);
}

JobBalance balance_job(std::string job, std::vector<RankMemory> ranks) {
  std::sort(ranks.begin(), ranks.end(),
            [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
  for (std::size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i].rank == ranks[i - 1].rank)
      throw InputError("job \"" + job + "\": rank " + std::to_string(ranks[i].rank) +
                       " appears twice (runs " + std::to_string(ranks[i - 1].run_id) + " and " +
                       std::to_string(ranks[i].run_id) + ")");
  }
  JobBalance balance;
  balance.job = std::move(job);
  if (!ranks.empty())
    balance.worst_rank = std::min_element(ranks.begin(), ranks.end(), worse)->rank;
  balance.reserved_imbalance = max_over_mean(ranks, &RankMemory::peak_reserved);
  balance.allocated_imbalance = max_over_mean(ranks, &RankMemory::peak_allocated);
  balance.ranks = std::move(ranks);
  return balance;
}

nlohmann::json to_json(const JobBalance& balance) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMemory& r : balance.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"run_id", r.run_id},
                     {"peak_allocated", r.peak_allocated},
                     {"peak_reserved", r.peak_reserved},
                     {"fragmentation", r.fragmentation()},
                     {"oom", r.oom}});
  }
  return {{"job", balance.job},
          {"ranks", std::move(ranks)},
          {"worst_rank", balance.worst_rank ? nlohmann::json(*balance.worst_rank) : nullptr}};
}

std::string to_text(const JobBalance& balance) {
  std::ostringstream out;
  out << "job " << balance.job << ": " << balance.ranks.size() << " rank(s)\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-6s %-8s %16s %16s %14s  %s\n", "rank", "run",
                "peak allocated", "peak reserved", "fragmentation", "OOM");
  out << line;
  for (const RankMemory& r : balance.ranks) {
    const bool worst = balance.worst_rank && *balance.worst_rank == r.rank;
    const std::string oom = r.oom ? (r.ooms > 1 ? std::to_string(r.ooms) + " OOMs" : "OOM") : "-";
    std::snprintf(line, sizeof line, "%s %-6d %-8lld %16s %16s %14s  %s%s\n", worst ? "*" : " ",
                  r.rank, static_cast<long long>(r.run_id),
                  alloc::format_size(r.peak_allocated).c_str(),
                  alloc::format_size(r.peak_reserved).c_str(), percent(r.fragmentation()).c_str(),
                  oom.c_str(), worst ? "  <- worst rank" : "");
    out << line;
  }
  if (!balance.ranks.empty()) {
    char summary[160];
    std::snprintf(summary, sizeof summary,
                  "imbalance (highest / mean peak): reserved %.3fx, allocated %.3fx\n",
                  balance.reserved_imbalance, balance.allocated_imbalance);
    out << summary;
  }
  return out.str();
}

}  // namespace fragscope::analysis
