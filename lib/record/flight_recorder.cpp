#include "record/flight_recorder.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "base/text.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::record {

const char* to_string(FlightRecorder::State state) {
  switch (state) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kRunning: return "running";
    case FlightRecorder::State::kDone: return "done";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "?";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : ring_(std::max<size_t>(capacity, 1)), here_(std::max<size_t>(capacity, 1)) {}

FlightRecorder::Slot* FlightRecorder::find(uint64_t seq) {
  Slot& slot = ring_[seq % ring_.size()];
  return slot.seq == seq ? &slot : nullptr;  // overwritten by a later one: nothing to update
}

uint64_t FlightRecorder::queued(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t seq = next_.fetch_add(1, std::memory_order_relaxed);
  Slot& slot = ring_[seq % ring_.size()];
  std::string name = std::move(slot.what);  // its buffer is reused: no allocation per collective
  name.assign(what);
  slot = Slot{};
  slot.seq = seq;
  slot.what = std::move(name);
  slot.queued = Clock::now();
  return seq;
}

void FlightRecorder::issued(const CollectiveName& name, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t seq = next_.fetch_add(1, std::memory_order_relaxed);
  Slot& slot = ring_[seq % ring_.size()];
  slot.seq = seq;
  slot.name = name;
  slot.state = State::kDone;
  slot.by_caller = true;
  slot.queued = slot.started = slot.ended = now;
  completed_ = std::max(completed_, seq + 1);
}

void FlightRecorder::started(uint64_t seq, bool by_caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Slot* e = find(seq)) {
    e->state = State::kRunning;
    e->by_caller = by_caller;
    e->started = Clock::now();
  }
}

void FlightRecorder::ended(uint64_t seq, bool ok, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ok) completed_ = std::max(completed_, seq + 1);
  if (Slot* e = find(seq)) {
    e->state = ok ? State::kDone : State::kFailed;
    e->ended = now;
  }
}

namespace {

// One writer's update of a HereSlot, as a seqlock's: the odd version goes out before any field, the even one after
// all of them (Boehm, "Can seqlocks get along with programming language memory models?", 2012).
class Writing {
 public:
  explicit Writing(std::atomic<uint64_t>& version)
      : version_(version), at_(version.load(std::memory_order_relaxed) + 1) {
    version_.store(at_, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~Writing() { version_.store(at_ + 1, std::memory_order_release); }
  Writing(const Writing&) = delete;
  Writing& operator=(const Writing&) = delete;

 private:
  std::atomic<uint64_t>& version_;
  const uint64_t at_;
};

constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

uint64_t FlightRecorder::started_here(const CollectiveName& name, Clock::time_point now) {
  const uint64_t seq = next_.fetch_add(1, kRelaxed);  // queued() may number one on another thread meanwhile
  HereSlot& slot = here_[seq % here_.size()];
  Writing writing(slot.version);
  slot.seq.store(seq, kRelaxed);
  slot.state.store(State::kRunning, kRelaxed);
  slot.kind.store(name.kind, kRelaxed);
  slot.count.store(name.count, kRelaxed);
  slot.type.store(name.type, kRelaxed);
  slot.op.store(name.op, kRelaxed);
  slot.root.store(name.root, kRelaxed);
  slot.algorithm.store(name.algorithm, kRelaxed);
  slot.on_device.store(name.on_device, kRelaxed);
  slot.started.store(now.time_since_epoch().count(), kRelaxed);
  slot.ended.store(0, kRelaxed);
  return seq;
}

void FlightRecorder::ended_here(uint64_t seq, bool ok, Clock::time_point now) {
  HereSlot& slot = here_[seq % here_.size()];
  {
    Writing writing(slot.version);  // the slot is still seq's: only the next started_here() reuses it
    slot.state.store(ok ? State::kDone : State::kFailed, kRelaxed);
    slot.ended.store(now.time_since_epoch().count(), kRelaxed);
  }
  // Callers' collectives end in sequence (one turn at a time), so this count only grows.
  if (ok) completed_here_.store(seq + 1, std::memory_order_release);
}

std::optional<FlightRecorder::Slot> FlightRecorder::read(const HereSlot& slot, uint64_t seq) {
  for (;;) {
    const uint64_t before = slot.version.load(std::memory_order_acquire);
    if (before % 2 == 1) {  // its writer is between two stores: a few instructions, unless it was preempted
      std::this_thread::yield();
      continue;
    }
    Slot e;
    e.seq = slot.seq.load(kRelaxed);
    CollectiveName name;
    name.kind = slot.kind.load(kRelaxed);
    name.count = slot.count.load(kRelaxed);
    name.type = slot.type.load(kRelaxed);
    name.op = slot.op.load(kRelaxed);
    name.root = slot.root.load(kRelaxed);
    name.algorithm = slot.algorithm.load(kRelaxed);
    name.on_device = slot.on_device.load(kRelaxed);
    e.name = name;
    e.state = slot.state.load(kRelaxed);
    e.by_caller = true;
    e.queued = e.started = Clock::time_point(Clock::duration(slot.started.load(kRelaxed)));
    const Clock::rep ended = slot.ended.load(kRelaxed);
    if (ended != 0) e.ended = Clock::time_point(Clock::duration(ended));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.version.load(kRelaxed) != before) continue;  // written meanwhile: a mix of two states
    if (e.seq != seq) return std::nullopt;
    return e;
  }
}

uint64_t FlightRecorder::called() const { return next_.load(std::memory_order_acquire); }

uint64_t FlightRecorder::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::max(completed_, completed_here_.load(std::memory_order_acquire));
}

std::vector<FlightRecorder::Entry> FlightRecorder::entries() const {
  // Steady times onto the wall clock by the clocks' offset now: off only by what the wall clock was stepped since.
  const auto wall_now = std::chrono::system_clock::now();
  const auto steady_now = Clock::now();
  auto wall = [&](Clock::time_point t) {
    if (t == Clock::time_point{}) return std::chrono::system_clock::time_point{};  // never came
    return wall_now - std::chrono::duration_cast<std::chrono::system_clock::duration>(steady_now - t);
  };
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Entry> kept;
  const uint64_t next = next_.load(std::memory_order_acquire);
  const uint64_t first = next > ring_.size() ? next - ring_.size() : 0;
  for (uint64_t seq = first; seq < next; ++seq) {
    std::optional<Slot> here;
    const Slot* slot = &ring_[seq % ring_.size()];
    if (slot->seq != seq) {
      here = read(here_[seq % here_.size()], seq);
      if (!here) continue;  // numbered, not yet written: its caller is about to start it
      slot = &*here;
    }
    Entry e;
    e.seq = seq;
    if (slot->name) {
      describe_into(e.what, *slot->name);
    } else {
      e.what = slot->what;
    }
    e.state = slot->state;
    e.by_caller = slot->by_caller;
    e.queued = wall(slot->queued);
    e.started = wall(slot->started);
    e.ended = wall(slot->ended);
    kept.push_back(std::move(e));
  }
  return kept;
}

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Microseconds since the epoch; 0 for a time that never came.
long long micros(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point{}) return 0;
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// Which thread ran it: "" for one not started.
const char* thread_name(const FlightRecorder::Entry& e) {
  if (e.state == FlightRecorder::State::kQueued) return "";
  return e.by_caller ? "caller" : "progress";
}

// "1, 3-5, 8"
std::string ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    base::append_listed(out, std::to_string(ranks[i]));
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + ranges(ranks);
}

}  // namespace

std::string FlightRecorder::json(const std::string& communicator, int rank, int size) const {
  std::ostringstream out;
  out << "{\"communicator\": " << quoted(communicator) << ", \"rank\": " << rank << ", \"size\": " << size
      << ", \"called\": " << called() << ", \"completed\": " << completed() << ", \"entries\": [";
  bool first = true;
  for (const Entry& e : entries()) {
    out << (first ? "" : ", ") << "{\"seq\": " << e.seq << ", \"op\": " << quoted(e.what) << ", \"state\": \""
        << to_string(e.state) << "\", \"thread\": \"" << thread_name(e) << "\", \"queued_us\": " << micros(e.queued)
        << ", \"started_us\": " << micros(e.started) << ", \"ended_us\": " << micros(e.ended) << "}";
    first = false;
  }
  out << "]}";
  return out.str();
}

std::string who_is_behind(Store& store, int rank, int size, uint64_t completed, std::chrono::milliseconds grace) {
  auto key = [](int r) { return "flight/" + std::to_string(r); };
  std::map<int, uint64_t> counts;  // rank -> collectives it completed
  bool store_lost = false;
  try {
    store.set(key(rank), std::to_string(completed));
    counts[rank] = completed;
    // One read per rank, each held by the store until the count appears or the grace is spent (no polling); once
    // it is spent, the rest are read as they are.
    const auto give_up = std::chrono::steady_clock::now() + grace;
    for (int r = 0; r < size; ++r) {
      if (counts.count(r)) continue;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      try {
        const Store::Bytes value = store.get_within(key(r), std::max(left, std::chrono::milliseconds(0)));
        counts[r] = std::stoull(std::string(value.begin(), value.end()));
      } catch (const TimeoutError&) {
        // silent: it never answered
      }
    }
  } catch (const std::exception&) {
    store_lost = true;  // its server's host may be the one that went away
  }
  std::vector<int> behind, ahead, silent;
  for (int r = 0; r < size; ++r) {
    auto it = counts.find(r);
    if (it == counts.end()) silent.push_back(r);
    else if (it->second < completed) behind.push_back(r);
    else if (it->second > completed) ahead.push_back(r);
  }
  std::ostringstream out;
  auto with_counts = [&](const std::vector<int>& ranks) {
    std::ostringstream text;
    text << ranks_word(ranks) << " (";
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) text << (i ? ", " : "") << counts[ranks[i]];
    text << (ranks.size() > 8 ? ", ...)" : ")");
    return text.str();
  };
  if (!behind.empty()) out << "; behind this rank (" << completed << " collectives completed): " << with_counts(behind);
  if (!ahead.empty()) out << "; ahead of this rank (" << completed << " completed): " << with_counts(ahead);
  if (!silent.empty()) {
    out << "; no answer from " << ranks_word(silent) << " within " << grace.count()
        << " ms (dead, or not in a hiercoll call)";
    if (store_lost) out << " - the store became unreachable";
  }
  return out.str();
}

}  // namespace hiercoll::record
