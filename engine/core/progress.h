#pragma once
// A progress bar over long work that reports in named stages (engine/core/cancel.h's Progress):
// one fraction of the whole that only grows and ends at exactly 1.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "engine/core/cancel.h"

namespace fragscope {

// One named stage of long work and its share of the whole (shares need not add up to 1).
struct ProgressStage {
  std::string_view name;
  double share = 1;
};

// A Progress that turns reports of `stages` (in that order) into one fraction of the whole for a
// progress bar: stage k covers [sum of the shares before it, + its share), divided by the sum of
// all shares. The fraction handed to `sink` only grows (a report that would go back, or of a stage
// not listed, is dropped), and the last stage's done == total gives exactly 1. Safe to report
// from several threads; `stages` must outlive the Progress (a static table).
inline Progress fraction_progress(std::span<const ProgressStage> stages,
                                  std::function<void(double)> sink) {
  struct State {
    std::mutex mutex;
    double last = 0;
    bool reported = false;
  };
  auto state = std::make_shared<State>();
  double whole = 0;
  for (const ProgressStage& stage : stages)
    whole += stage.share;
  return Progress([stages, sink = std::move(sink), state, whole](
                      std::string_view name, std::uint64_t done, std::uint64_t total) {
    double before = 0;
    for (const ProgressStage& stage : stages) {
      if (stage.name != name) {
        before += stage.share;
        continue;
      }
      const double part =
          total == 0 ? 0.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
      const double fraction =
          whole <= 0 ? 1.0 : std::min(1.0, (before + stage.share * part) / whole);
      std::lock_guard lock(state->mutex);
      if (state->reported && fraction <= state->last)
        return;
      state->reported = true;
      state->last = fraction;
      sink(fraction);
      return;
    }
  });
}

}  // namespace fragscope
