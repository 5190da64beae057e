#pragma once
// The last collectives of one communicator, kept for the moment a job hangs (as PyTorch's flight recorder for
// NCCL, Horovod's stall inspector): each with its sequence number (the n-th collective this rank enqueued), what
// it was, how far it got, and when. On a failure the record is written out (HIERCOLL_FLIGHT_DUMP, then
// tools/flight-report merges the ranks' files), and a timeout asks the other ranks how many collectives they
// completed, so its error names the ranks that are behind or silent.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "hiercoll/store.hpp"

namespace hiercoll::engine {

class FlightRecorder {
 public:
  enum class State { kQueued, kRunning, kDone, kFailed };
  struct Entry {
    uint64_t seq = 0;
    std::string what;
    State state = State::kQueued;
    std::chrono::system_clock::time_point queued, started, ended;  // wall clock: comparable across hosts
  };

  /// Keeps the last `capacity` collectives (at least 1).
  explicit FlightRecorder(size_t capacity);

  /// A collective was enqueued; returns its sequence number (0, 1, ...). Any thread.
  uint64_t queued(const std::string& what);
  void started(uint64_t seq);
  void ended(uint64_t seq, bool ok);
  /// queued() and started() at once, for a collective its caller runs itself. `write_name(std::string&)` writes
  /// what it is into the entry's buffer, which is reused: nothing is allocated once the ring has gone round.
  template <class WriteName>
  uint64_t running(const WriteName& write_name) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t seq = next_++;
    Entry& slot = ring_[seq % ring_.size()];
    slot.seq = seq;
    slot.what.clear();
    write_name(slot.what);
    slot.state = State::kRunning;
    slot.queued = slot.started = std::chrono::system_clock::now();
    slot.ended = {};
    return seq;
  }

  /// How many collectives were enqueued.
  uint64_t called() const;
  /// How many collectives completed, counting from the first (all of them, not only those still kept).
  uint64_t completed() const;
  /// The kept entries, oldest first.
  std::vector<Entry> entries() const;
  /// The record as one JSON object (what HIERCOLL_FLIGHT_DUMP writes and tools/flight-report reads).
  std::string json(const std::string& communicator, int rank, int size) const;

 private:
  Entry* find(uint64_t seq);  // under mutex_

  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  uint64_t next_ = 0;
  uint64_t completed_ = 0;  // collectives complete in sequence (they run in order, one at a time)
};

/// After a timeout: publishes how many collectives this rank completed under "flight/<rank>" in `store` and
/// waits up to `grace` for every other rank's count. Returns a sentence naming the ranks behind this one, those
/// ahead, and those that never answered (dead, or hung outside hiercoll), or "" if every rank is level with
/// this one. Never throws: the store may be gone with its host.
std::string who_is_behind(Store& store, int rank, int size, uint64_t completed, std::chrono::milliseconds grace);

const char* to_string(FlightRecorder::State state);

}  // namespace hiercoll::engine
