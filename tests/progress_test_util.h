#pragma once
// Tests of long work's progress and cancellation: every report the work makes, as a fraction of
// the whole over the work's stages (the formula of fraction_progress, but unfiltered, so a report
// that went back is seen), and a cancel once the work is a chosen fraction of the way.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/cancel.h"
#include "engine/core/progress.h"

namespace fragscope::test {

class ProgressRecorder {
 public:
  // Reports of `stages`, each done of its own total; no stages: every report is done of the
  // whole's total whatever its stage (one count, as the GUI's JobContext reads it).
  explicit ProgressRecorder(std::span<const ProgressStage> stages = {}) : stages_(stages) {}

  std::vector<double> fractions;            // every report, in order
  std::vector<std::string> unknown_stages;  // reports of stages the table lacks
  CancelToken token = CancelToken::make();
  double cancel_at = 2;  // cancels `token` once a report reaches this fraction (2: never)

  // Reports from any thread; the recorder must outlive the work.
  Progress progress() {
    return Progress([this](std::string_view stage, std::uint64_t done, std::uint64_t total) {
      std::lock_guard lock(mutex_);
      if (stages_.empty()) {
        record(total == 0 ? 0.0 : static_cast<double>(done) / static_cast<double>(total));
        return;
      }
      double whole = 0;
      double before = 0;
      bool found = false;
      for (const ProgressStage& s : stages_) {
        whole += s.share;
        if (!found && s.name == stage) {
          found = true;
          const double part =
              total == 0 ? 0.0
                         : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
          before += s.share * part;
        } else if (!found) {
          before += s.share;
        }
      }
      if (!found) {
        unknown_stages.emplace_back(stage);
        return;
      }
      record(before / whole);
    });
  }

 private:
  void record(double fraction) {
    fractions.push_back(fraction);
    if (fraction >= cancel_at)
      token.cancel();
  }

  std::span<const ProgressStage> stages_;
  std::mutex mutex_;
};

// Every report is at least the one before it, the last is exactly 1, every stage was known, and
// there were at least `reports` of them.
inline ::testing::AssertionResult grows_to_one(const ProgressRecorder& recorder,
                                               std::size_t reports = 3) {
  const std::vector<double>& f = recorder.fractions;
  if (!recorder.unknown_stages.empty())
    return ::testing::AssertionFailure() << "unknown stage " << recorder.unknown_stages.front();
  if (f.size() < reports)
    return ::testing::AssertionFailure() << f.size() << " report(s), expected " << reports;
  for (std::size_t i = 1; i < f.size(); ++i)
    if (f[i] < f[i - 1])
      return ::testing::AssertionFailure()
             << "report " << i << " went back from " << f[i - 1] << " to " << f[i];
  if (f.back() != 1.0)
    return ::testing::AssertionFailure() << "ended at " << f.back();
  return ::testing::AssertionSuccess();
}

// A cancelled piece of work reported no more than `high` of the way (it stopped early).
inline ::testing::AssertionResult stopped_before(const ProgressRecorder& recorder, double high) {
  if (recorder.fractions.empty())
    return ::testing::AssertionFailure() << "nothing reported";
  const double last = recorder.fractions.back();
  if (last > high)
    return ::testing::AssertionFailure() << "went on to " << last << " after the cancel";
  return ::testing::AssertionSuccess();
}

}  // namespace fragscope::test
