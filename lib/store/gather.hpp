#pragma once
// Start-up's exchanges through the store, beside it as NCCL keeps bootstrapAllGather beside its socket store: a
// wait for one key that a watcher may end early, and an allgather of every rank's record in O(N) requests to the
// store's server. The caller says when to give up (a deadline) and when to stop early (a check that throws, called
// between slices of the wait: the engine's throws the failure its peer watch reported).
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "hiercoll/store.hpp"

namespace hiercoll::store {

struct StartupWait {
  std::chrono::steady_clock::time_point deadline;
  /// The first slice of a wait; slices double up to kLongestSlice. A wait that nothing can end early (no `stop`)
  /// should make this the whole time left: one read, held by the server.
  std::chrono::milliseconds first_slice{50};
  /// Called before each slice and once more before giving up, with the keys awaited and what a timeout would say
  /// is missing; throws to end the wait. Empty: nothing ends it early.
  std::function<void(const std::vector<std::string>& keys, const std::function<std::string()>& missing)> stop;
  /// Ends a TimeoutError's message, after "<what is missing> ": "within 30000 ms (communicator 'world')".
  std::string timeout_context;
  static constexpr std::chrono::milliseconds kLongestSlice{1000};
};

/// `key`'s value, read with Store::get_within in slices until `wait.deadline`; `on_slow` runs once, when a first
/// slice found nothing. Throws TimeoutError naming `missing()` and `wait.timeout_context`, or what `wait.stop`
/// throws.
Store::Bytes get_waiting(Store& store, const std::string& key, const StartupWait& wait,
                         const std::function<std::string()>& missing, const std::function<void()>& on_slow = {});

/// Every rank's `mine`, in rank order. Every rank but 0 writes "<name>/<rank>" and waits for "<name>/all"; rank 0
/// reads each rank's in turn (writing "<name>/waiting" while it waits for a late one, so that the others' errors
/// name where it stands) and writes them all as one blob: O(N) requests to the server and two waits per rank.
std::vector<Store::Bytes> allgather(Store& store, const std::string& name, int rank, int size, const Store::Bytes& mine,
                                    const StartupWait& wait);

}  // namespace hiercoll::store
