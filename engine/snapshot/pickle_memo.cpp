// The pickle machine's memo (pickle_vm.h): a window of plain slots, older ones folded into runs.
#include <algorithm>

#include "engine/snapshot/pickle_vm.h"

namespace fragscope::snapshot::pickle {
namespace {

// Shorter sequences are not worth a run of their own.
constexpr std::uint64_t kMinSequence = 4;

bool continues(const Value& previous, const Value& next) {
  return previous.kind == Kind::trace_event && next.kind == Kind::trace_event &&
         next.ref == previous.ref && next.i == previous.i + 1;
}

Value unset_value() {
  Value v;
  v.kind = Kind::unset;
  return v;
}

}  // namespace

void Memo::grow(std::uint64_t size) {
  if (size <= this->size())
    return;
  recent_.resize(static_cast<std::size_t>(size - base_), unset_value());
  while (recent_.size() >= 2 * kWindow)
    fold_oldest();
}

void Memo::fold_oldest() {
  const std::size_t fold = kWindow;
  std::size_t i = 0;
  while (i < fold) {
    std::size_t end = i + 1;
    while (end < fold && continues(recent_[end - 1], recent_[end]))
      ++end;
    if (end - i >= kMinSequence) {
      Run run;
      run.first_slot = base_ + i;
      run.count = end - i;
      run.sequence = true;
      run.first = recent_[i];
      runs_.push_back(run);
      i = end;
      continue;
    }
    // Literal values up to the next sequence worth a run; appended to the previous literal run
    // when it ends right here.
    end = i + 1;
    while (end < fold) {
      std::size_t probe = end;
      while (probe + 1 < fold && probe + 1 - end < kMinSequence &&
             continues(recent_[probe], recent_[probe + 1]))
        ++probe;
      if (probe + 1 - end >= kMinSequence)
        break;
      ++end;
    }
    if (!runs_.empty() && !runs_.back().sequence &&
        runs_.back().first_slot + runs_.back().count == base_ + i) {
      runs_.back().count += end - i;
    } else {
      Run run;
      run.first_slot = base_ + i;
      run.count = end - i;
      run.literal = literals_.size();
      runs_.push_back(run);
    }
    literals_.insert(literals_.end(), recent_.begin() + static_cast<std::ptrdiff_t>(i),
                     recent_.begin() + static_cast<std::ptrdiff_t>(end));
    i = end;
  }
  recent_.erase(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(fold));
  base_ += fold;
}

const Memo::Run& Memo::run_of(std::uint64_t slot) const {
  // The first run (the keys and values memoized at the file's start) and the one found last
  // answer most reads without a search.
  auto holds = [slot](const Run& run) {
    return slot >= run.first_slot && slot - run.first_slot < run.count;
  };
  if (holds(runs_.front()))
    return runs_.front();
  if (last_run_ < runs_.size() && holds(runs_[last_run_]))
    return runs_[last_run_];
  auto it = std::upper_bound(runs_.begin(), runs_.end(), slot,
                             [](std::uint64_t s, const Run& run) { return s < run.first_slot; });
  last_run_ = static_cast<std::size_t>(std::prev(it) - runs_.begin());
  return *std::prev(it);
}

Value Memo::get_folded(std::uint64_t slot) const {
  if (!overrides_.empty())
    if (auto it = overrides_.find(slot); it != overrides_.end())
      return it->second;
  const Run& run = run_of(slot);
  const std::uint64_t offset = slot - run.first_slot;
  if (!run.sequence)
    return literals_[static_cast<std::size_t>(run.literal + offset)];
  Value v = run.first;
  v.i += static_cast<std::int64_t>(offset);
  return v;
}

void Memo::set(std::uint64_t slot, const Value& value) {
  if (slot >= base_)
    recent_[static_cast<std::size_t>(slot - base_)] = value;
  else
    overrides_[slot] = value;
}

std::size_t Memo::memory_bytes() const {
  return recent_.capacity() * sizeof(Value) + runs_.capacity() * sizeof(Run) +
         literals_.capacity() * sizeof(Value) + overrides_.size() * (sizeof(Value) + 32);
}

}  // namespace fragscope::snapshot::pickle
