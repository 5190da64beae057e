#include "device/host_queue.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/spin.hpp"
#include "hiercoll/errors.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::device {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the futex word is the low half of a flag's generation");

// Sleeping on a flag (see queue.hpp): futex(2) on the low 32 bits of word 0, which every signal changes, with word
// 2 counting the sleepers so that a signal makes a system call only when someone sleeps. Shared futexes (no
// FUTEX_PRIVATE_FLAG): the flags are in shared memory and the ranks are processes.
std::atomic<uint32_t>& sleepers(uint64_t* flag) { return *reinterpret_cast<std::atomic<uint32_t>*>(flag + 2); }

void futex_wait(uint64_t* flag, uint32_t expected, std::chrono::nanoseconds timeout) {
  const timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(flag), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(uint64_t* flag) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(flag), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Spinning at least this long before sleeping (a peer's signal is often microseconds away), and up to kLongestSpin
// while waits are typically that short (base::AdaptiveSpin: two ranks asleep in turn).
constexpr std::chrono::microseconds kSpin{20};
constexpr std::chrono::microseconds kLongestSpin{200};
// A wait first only polls its flag, with the CPU's spin hint, for base::kPollOnly (where each rank has a core of its
// own), reading the clock (for the deadline, the abort switch and the end of this phase) once per kPollsPerCheck
// polls; then it yields the core at every poll until its spin budget is spent.
constexpr unsigned kPollsPerCheck = 64;
thread_local base::AdaptiveSpin flag_spin{kSpin, kLongestSpin};
// A sleeper's futex wait ends at its deadline, at the signal, at a halt (wake_sleepers) or at the end of a slice,
// which is only the net under a missed signal (see kWakeGrace) and under a halt that came between the sleeper's last
// look at the abort switch and its sleep. The slices grow (first, doubling to longest): a long wait wakes a few times
// a second, not at a fixed rate, for each wake-up costs a waiting rank CPU (docs/benchmarks.md, "What waiting
// costs").
constexpr std::chrono::milliseconds kFirstSlice{50};
constexpr std::chrono::milliseconds kLongestSlice{160};

// The flags this process's threads sleep on, so that a halt wakes them at once. Leaked: a thread may still sleep while
// the process exits. A flag is listed from before its sleeper's last look at the abort switch until it wakes, and its
// memory outlives that (the sleeper is inside wait_flag), so wake_sleepers may wake any listed flag.
struct Sleepers {
  std::mutex mutex;
  std::vector<uint64_t*> flags;  // one entry per sleeping thread
};
Sleepers& process_sleepers() {
  static auto* list = new Sleepers;
  return *list;
}

// Lists `flag` as slept on for its lifetime.
class ListedSleep {
 public:
  explicit ListedSleep(uint64_t* flag) : flag_(flag) {
    std::lock_guard<std::mutex> lock(process_sleepers().mutex);
    process_sleepers().flags.push_back(flag);
  }
  ~ListedSleep() {
    auto& list = process_sleepers();
    std::lock_guard<std::mutex> lock(list.mutex);
    list.flags.erase(std::find(list.flags.begin(), list.flags.end(), flag_));
  }
  ListedSleep(const ListedSleep&) = delete;
  ListedSleep& operator=(const ListedSleep&) = delete;

 private:
  uint64_t* flag_;
};
// A signal stores the generation and then reads the sleeper count with no fence between (HostQueue::signal), so its
// read may pass its store: it can see no sleeper while its generation still waits in its core's store buffer, to
// become visible a few hundred nanoseconds later. A waiter that counted itself a sleeper therefore looks at the
// flag for this long before it sleeps: by then any store issued before its count became visible is visible too
// (a store buffer drains in far less; a vCPU's does when it leaves the CPU). Should a signal still be missed, the
// sleeper wakes at its slice's end. What the fence cost instead was paid by every signal.
constexpr std::chrono::microseconds kWakeGrace{2};

// What every wait checks between looks at its flag: the abort switch, then the deadline. `local_rank` names whom a
// timeout waited for (-1: the queue, for host_wait).
void check_limits(const WaitContext& context, std::chrono::steady_clock::time_point now, int local_rank) {
  if (context.aborted->load(std::memory_order_relaxed)) {
    throw RemoteError(context.name() + ": the communicator was aborted");
  }
  if (now >= context.deadline) {
    const std::string who = local_rank < 0 ? "the queue" : "local rank " + std::to_string(local_rank);
    throw TimeoutError(context.name() + ": " + who + " never reached this step (did it die, or call another operation?)");
  }
}

// Until flag word 0 reaches `generation`, the context's deadline or abort: spins briefly, then sleeps in the
// kernel until a signal wakes it. `local_rank` names whom a timeout waited for.
// The spin polls without system calls for its first base::kPollOnly, which notices a signal sooner than a poll
// between sched_yield calls does; then each poll yields the core. Without those yields, two ranks the scheduler put
// on one core (a wake-up pulls the wakee to the waker's core) took a whole spin each to pass the core over, for the
// first tens of milliseconds of a job. `yield_at_once` (the node's ranks outnumber its cores, so peers surely share
// them): every poll yields.
void wait_flag(uint64_t* flag, uint64_t generation, const WaitContext& context, int local_rank, bool yield_at_once) {
  auto reached = [&] { return flag_word(flag, 0).load(std::memory_order_acquire) >= generation; };
  if (reached()) return;
  if (!yield_at_once) {
    // Most waits of a small operation end within a few polls: those read no clock (two reads show in a small
    // allreduce's profile) and count as short ones for the spin's adaptation.
    for (unsigned i = 0; i < kPollsPerCheck; ++i) {
      base::cpu_relax();
      if (reached()) return flag_spin.record(std::chrono::nanoseconds(0));
    }
  }
  const auto started = std::chrono::steady_clock::now();
  const auto spin_until = started + flag_spin.budget();
  const auto poll_only_until = yield_at_once ? started : started + base::kPollOnly;
  bool polling = !yield_at_once;
  unsigned polls = 0;
  std::chrono::nanoseconds slice = kFirstSlice;
  while (!reached()) {
    if (polling && ++polls % kPollsPerCheck != 0) {
      base::cpu_relax();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    check_limits(context, now, local_rank);
    polling = now < poll_only_until;
    if (polling) continue;
    if (now < spin_until) {
      std::this_thread::yield();
      continue;
    }
    // Counted as a sleeper first, then the generation read again for kWakeGrace: either this thread sees the new
    // generation, or the signaller sees the sleeper and wakes it.
    sleepers(flag).fetch_add(1, std::memory_order_seq_cst);
    uint64_t seen = flag_word(flag, 0).load(std::memory_order_seq_cst);
    for (const auto grace_until = std::chrono::steady_clock::now() + kWakeGrace;
         seen < generation && std::chrono::steady_clock::now() < grace_until;) {
      if (yield_at_once) {
        std::this_thread::yield();  // a peer sharing this core may be the one to signal
      } else {
        base::cpu_relax();
      }
      seen = flag_word(flag, 0).load(std::memory_order_acquire);
    }
    if (seen < generation) {
      const ListedSleep listed(flag);
      // Listed before this look: a halt after it wakes the sleep below, unless its wake lands in the instant
      // before the sleep begins (then the slice's end does).
      if (!context.aborted->load(std::memory_order_seq_cst)) {
        const auto left = std::min<std::chrono::nanoseconds>(context.deadline - now, slice);
        futex_wait(flag, static_cast<uint32_t>(seen), std::max(left, std::chrono::nanoseconds(1000)));
        slice = std::min<std::chrono::nanoseconds>(2 * slice, kLongestSlice);
      }
    }
    sleepers(flag).fetch_sub(1, std::memory_order_relaxed);
  }
  flag_spin.record(std::chrono::steady_clock::now() - started);
}

// host_wait's flags (HostFlag) have no sleeper word, and host_signal() wakes no one: nothing to block on, so the
// wait polls, yielding the core at every poll, and never sleeps a fixed step (which would add that step to every
// hand-over that just misses a poll).
template <class Reached>
void poll(const WaitContext& context, Reached reached) {
  while (!reached()) {
    check_limits(context, std::chrono::steady_clock::now(), -1);
    std::this_thread::yield();
  }
}
}  // namespace

void HostQueue::wake_sleepers() {
  auto& list = process_sleepers();
  std::lock_guard<std::mutex> lock(list.mutex);
  for (uint64_t* flag : list.flags) futex_wake(flag);
}

void HostQueue::copy(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
}

void HostQueue::publish(void* dst, const void* src, size_t bytes) { reduce::publish(dst, src, bytes); }

void HostQueue::reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
                       ReduceOp op) {
  if (source_count == 1) return copy(dst, sources[0], count * dtype_size(type));
  reduce::reduce_sources(dst, sources, source_count, count, type, op);
}

void HostQueue::reduce_to_both(void* shared, void* mine, const void* const* sources, int source_count, size_t count,
                               DataType type, ReduceOp op) {
  if (source_count == 1) {
    copy(mine, sources[0], count * dtype_size(type));
    return publish(shared, mine, count * dtype_size(type));
  }
  // Into this rank's own memory first, and copied from there to the lines the other ranks read (reduce_sources).
  reduce::reduce_sources(mine, sources, source_count, count, type, op, shared);
}

void HostQueue::divide(void* data, size_t count, DataType type, int divisor) {
  reduce::divide(data, count, type, divisor);
}

void HostQueue::signal(uint64_t* flag, uint64_t generation, uint64_t signature) {
  // No fence between the store and the load (see kWakeGrace): a sequentially consistent store waits for the line
  // to come from the core that polls it, and the signalling rank would stall there at every call (a seventh of a
  // 2-rank 8 B allreduce).
  flag_word(flag, 1).store(signature, std::memory_order_relaxed);
  flag_word(flag, 0).store(generation, std::memory_order_release);
  if (sleepers(flag).load(std::memory_order_relaxed) != 0) futex_wake(flag);
}

void HostQueue::wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                     const WaitContext& context) {
  for (int k = 0; k < flag_count; ++k) {
    wait_flag(flags[k], generation, context, k, yield_);
    // The generation was published after the signature (release/acquire): this read sees this step's.
    if (signature != 0 && flag_word(flags[k], 1).load(std::memory_order_relaxed) != signature) {
      throw InvalidUsageError(context.name() + ": local rank " + std::to_string(k) +
                              " called this operation with a different count, type or op");
    }
  }
}

void HostQueue::host_wait(const HostFlag& flag, uint64_t value, const WaitContext& context) {
  poll(context, [&] { return flag_word(flag.host_side, 0).load(std::memory_order_acquire) >= value; });
}

}  // namespace hiercoll::device
