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
#include <vector>

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

// A Progress that reports every stage of the work it is handed as `name`: a run of the allocator
// model that is one stage of a larger piece of work (the replay's dry run, the advisor's baseline).
// Empty when `outer` is.
inline Progress progress_as(const Progress& outer, std::string_view name) {
  if (!outer)
    return {};
  return Progress([outer, name](std::string_view, std::uint64_t done, std::uint64_t total) {
    outer.report(name, done, total);
  });
}

// Units one step of nested work is split into (nested_progress), so the outer bar moves smoothly.
inline constexpr std::uint64_t kNestedProgressUnits = 1000;

// A Progress for work nested in a larger job: what the nested work reports over its `stages`, as
// one fraction (fraction_progress), moves `outer`'s stage `outer_stage` from `from` to `to` of
// `total` steps (each step kNestedProgressUnits units). The outer bar therefore only grows while
// the nested work runs, and stands at `to` when it ends. Empty when `outer` is.
inline Progress nested_progress(const Progress& outer, std::string_view outer_stage,
                                std::uint64_t from, std::uint64_t to, std::uint64_t total,
                                std::span<const ProgressStage> stages) {
  if (!outer)
    return {};
  return fraction_progress(stages, [outer, outer_stage, from, to, total](double fraction) {
    const double steps = static_cast<double>(from) + fraction * static_cast<double>(to - from);
    outer.report(outer_stage,
                 static_cast<std::uint64_t>(steps * static_cast<double>(kNestedProgressUnits)),
                 total * kNestedProgressUnits);
  });
}

// Progress of work split into parts that may run on several threads at once (the what-if's rows,
// a sweep's points): each part moves its own fraction (part(i) hands its nested work a Progress,
// set(i, f) moves it directly), and `outer` is told (`stage`, the parts' units summed, parts ·
// kNestedProgressUnits) under one lock, so the count only grows whichever thread reports. Must
// outlive the Progress objects part() hands out.
class PartsProgress {
 public:
  PartsProgress(const Progress& outer, std::string_view stage, std::size_t parts)
      : outer_(outer), stage_(stage), units_(parts, 0) {}
  PartsProgress(const PartsProgress&) = delete;
  PartsProgress& operator=(const PartsProgress&) = delete;

  // Reports (stage, 0, total): where the bar starts.
  void start() const { outer_.report(stage_, 0, units_.size() * kNestedProgressUnits); }
  // A Progress for part `i`'s nested work: what it reports (done of total, any stage) moves the
  // part from `from` to `to` of its share. Empty when nobody listens.
  Progress part(std::size_t i, double from = 0, double to = 1) {
    if (!outer_)
      return {};
    return Progress([this, i, from, to](std::string_view, std::uint64_t done, std::uint64_t total) {
      if (total > 0)
        set(i, from + (to - from) * static_cast<double>(done) / static_cast<double>(total));
    });
  }
  // Moves part `i` to `fraction` of its share (a fraction below the part's own is ignored).
  void set(std::size_t i, double fraction) {
    if (!outer_)
      return;
    const auto units = static_cast<std::uint64_t>(std::clamp(fraction, 0.0, 1.0) *
                                                  static_cast<double>(kNestedProgressUnits));
    std::lock_guard lock(mutex_);
    if (units <= units_[i])
      return;
    sum_ += units - units_[i];
    units_[i] = units;
    outer_.report(stage_, sum_, units_.size() * kNestedProgressUnits);
  }

 private:
  const Progress& outer_;
  std::string_view stage_;
  std::mutex mutex_;
  std::vector<std::uint64_t> units_;
  std::uint64_t sum_ = 0;
};

}  // namespace fragscope
