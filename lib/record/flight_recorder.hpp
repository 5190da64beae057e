#pragma once
// The last collectives of one communicator, kept for the moment a job hangs (as PyTorch's flight recorder for
// NCCL, Horovod's stall inspector): each with its sequence number (the n-th collective this rank enqueued), what
// it was, how far it got, and when. On a failure the record is written out (HIERCOLL_FLIGHT_DUMP, then
// tools/flight-report merges the ranks' files), and a timeout asks the other ranks how many collectives they
// completed, so its error names the ranks that are behind or silent.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hiercoll/store.hpp"
#include "record/describe.hpp"

namespace hiercoll::record {

class FlightRecorder {
 public:
  enum class State { kQueued, kRunning, kDone, kFailed };
  struct Entry {
    uint64_t seq = 0;
    std::string what;
    State state = State::kQueued;
    bool by_caller = false;  // run by the thread that called it, not the progress thread
    std::chrono::system_clock::time_point queued, started, ended;  // wall clock: comparable across hosts
  };
  using Clock = std::chrono::steady_clock;

  /// Keeps the last `capacity` collectives (at least 1).
  explicit FlightRecorder(size_t capacity);

  /// A collective was enqueued; returns its sequence number (0, 1, ...). Any thread.
  uint64_t queued(const std::string& what);
  /// It started, on its caller's thread (`by_caller`) or the progress thread.
  void started(uint64_t seq, bool by_caller);
  void ended(uint64_t seq, bool ok) { ended(seq, ok, Clock::now()); }
  void ended(uint64_t seq, bool ok, Clock::time_point now);
  /// A collective recorded as run, and done, when it is issued: a one-rank device collective, which nothing on the
  /// host runs and no peer waits for. Any thread.
  void issued(const CollectiveName& name, Clock::time_point now);

  /// queued() and started() at once, at `now`, for a collective its caller runs itself while it holds the caller's
  /// turn (the engine's run_here); then its end. These two are most of a small collective's bookkeeping, so
  /// they take no lock (the mutex round trips they took before showed in a small allreduce's profile). Hence their one
  /// rule: one thread at a time calls them (the turn orders its holders), while any thread may read the record. The
  /// collective is kept as data and named only when the record is read. Coarse times (base::coarse_now: milliseconds)
  /// are enough for both ends.
  uint64_t started_here(const CollectiveName& name, Clock::time_point now);
  void ended_here(uint64_t seq, bool ok, Clock::time_point now);

  /// How many collectives were enqueued.
  uint64_t called() const;
  /// How many collectives completed, counting from the first (all of them, not only those still kept).
  uint64_t completed() const;
  /// The kept entries, oldest first.
  std::vector<Entry> entries() const;
  /// The record as one JSON object (what HIERCOLL_FLIGHT_DUMP writes and tools/flight-report reads).
  std::string json(const std::string& communicator, int rank, int size) const;

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};

  // The queued, progress-thread and issued collectives, under mutex_: times on the steady clock (one read costs
  // what a wall-clock read does, and the deadline needs that clock anyway), put on the wall clock when the record
  // is read; the name as text, or as data.
  struct Slot {
    uint64_t seq = kNone;
    std::string what;
    std::optional<CollectiveName> name;  // set: `what` is this, not yet written
    State state = State::kQueued;
    bool by_caller = false;
    Clock::time_point queued, started, ended;
  };
  Slot* find(uint64_t seq);  // under mutex_

  // The collectives run by their callers, without a lock: one writer at a time, readers check `version` (odd
  // while the writer is at it; changed: read again). Every field is atomic, so a reader racing the writer reads
  // stale or new values, never torn ones, and learns from `version` which it got.
  struct HereSlot {
    std::atomic<uint64_t> version{0};
    std::atomic<uint64_t> seq{kNone};
    std::atomic<State> state{State::kRunning};
    std::atomic<algo::Kind> kind{algo::Kind::kBarrier};
    std::atomic<size_t> count{0};
    std::atomic<DataType> type{DataType::kFloat32};
    std::atomic<ReduceOp> op{ReduceOp::kSum};
    std::atomic<int> root{-1};
    std::atomic<algo::Algorithm> algorithm{algo::Algorithm::kRing};
    std::atomic<bool> on_device{false};
    std::atomic<Clock::rep> started{0}, ended{0};
  };
  // The entry of `seq` if `slot` holds it; waits out a writer in the middle of it.
  static std::optional<Slot> read(const HereSlot& slot, uint64_t seq);

  mutable std::mutex mutex_;
  std::vector<Slot> ring_;
  std::vector<HereSlot> here_;  // as many as ring_: seq's entry is in ring_ or here_, at seq % size
  std::atomic<uint64_t> next_{0};
  uint64_t completed_ = 0;  // collectives complete in sequence (they run in order, one at a time); under mutex_
  std::atomic<uint64_t> completed_here_{0};  // the same, of those run by their callers
};

/// After a timeout: publishes how many collectives this rank completed under "flight/<rank>" in `store` and
/// waits up to `grace` for every other rank's count. Returns a sentence naming the ranks behind this one, those
/// ahead, and those that never answered (dead, or hung outside hiercoll), or "" if every rank is level with
/// this one. Never throws: the store may be gone with its host.
std::string who_is_behind(Store& store, int rank, int size, uint64_t completed, std::chrono::milliseconds grace);

const char* to_string(FlightRecorder::State state);

}  // namespace hiercoll::record
