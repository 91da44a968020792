#pragma once
// Long work (import, replay, what-if, sweeps, timeline queries) takes a CancelToken and a Progress.
// The work polls the token between units and throws Cancelled; the caller that owns the side
// effects (a storage transaction, a GUI job) then rolls back, so a cancelled import leaves nothing.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace fragscope {

// Thrown by CancelToken::throw_if_cancelled(); not an InputError, so no front-end reports it as bad
// input.
class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("cancelled") {}
};

// Cheap to copy: copies share one flag, so the GUI thread can cancel what a worker polls. A
// default-constructed token is never cancelled and costs one branch to poll.
class CancelToken {
 public:
  CancelToken() = default;
  static CancelToken make() {
    CancelToken token;
    token.flag_ = std::make_shared<std::atomic<bool>>(false);
    return token;
  }

  void cancel() const {
    if (flag_)
      flag_->store(true, std::memory_order_relaxed);
  }
  bool cancelled() const { return flag_ && flag_->load(std::memory_order_relaxed); }
  void throw_if_cancelled() const {
    if (cancelled())
      throw Cancelled{};
  }

 private:
  std::shared_ptr<std::atomic<bool>> flag_;
};

// Reports how far long work has come: `done` of `total` units in a named stage ("reading",
// "storing", ...). total == 0 means the total is unknown. Reporters must be cheap; callers report
// at most every few thousand units.
class Progress {
 public:
  using Callback =
      std::function<void(std::string_view stage, std::uint64_t done, std::uint64_t total)>;

  Progress() = default;
  explicit Progress(Callback callback) : callback_(std::move(callback)) {}

  void report(std::string_view stage, std::uint64_t done, std::uint64_t total) const {
    if (callback_)
      callback_(stage, done, total);
  }
  explicit operator bool() const { return static_cast<bool>(callback_); }

 private:
  Callback callback_;
};

// What long work takes: poll `cancel`, report to `progress`. Both may be empty.
struct WorkControl {
  CancelToken cancel;
  Progress progress;

  void check() const { cancel.throw_if_cancelled(); }
};

}  // namespace fragscope
