#pragma once
// Doubling pauses between tries of something that offers nothing to block on: a server not listening yet, a hub out
// of room for a burst, a CUDA event recorded without a blocking-sync flag. Short at first, so that what is almost
// ready costs little delay; capped, so that a long wait costs few wake-ups. Never for a wait that something can end
// by waking the waiter (a condition variable, epoll, a provider's wait object): those block.
#include <algorithm>
#include <chrono>
#include <thread>

namespace hiercoll::base {

template <class Duration>
class Backoff {
 public:
  /// Pauses of `first`, twice that, and so on up to `most`.
  Backoff(Duration first, Duration most) : next_(first), most_(most) {}
  /// The pause the next pause() sleeps.
  Duration upcoming() const { return next_; }
  /// Sleeps the upcoming pause; the one after is twice as long, up to `most`.
  void pause() {
    std::this_thread::sleep_for(next_);
    next_ = std::min(next_ * 2, most_);
  }

 private:
  Duration next_, most_;
};

}  // namespace hiercoll::base
