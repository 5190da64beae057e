#pragma once
// HostQueue: the Queue of host memory. Each call runs at once on the calling thread. Flag waits spin briefly,
// then sleep in the kernel (futex) until the signal that reaches them wakes them, so a rank waiting for a late
// peer costs no CPU. Where the node's ranks outnumber its cores, the spin yields the core at every poll
// (set_yield): the peer being waited for may be the one that needs it. host_wait's flags wake no one when they
// change, so it polls, yielding the core at every poll.
#include "device/queue.hpp"

namespace hiercoll::device {

class HostQueue final : public Queue {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }
  void copy(void* dst, const void* src, size_t bytes) override;
  void publish(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
              ReduceOp op) override;
  void reduce_to_both(void* shared, void* mine, const void* const* sources, int source_count, size_t count,
                      DataType type, ReduceOp op) override;
  void divide(void* data, size_t count, DataType type, int divisor) override;
  void signal(uint64_t* flag, uint64_t generation, uint64_t signature) override;
  void wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
            const WaitContext& context) override;
  void host_wait(const HostFlag& flag, uint64_t value, const WaitContext& context) override;

  /// Wakes every thread of this process asleep in a flag wait, whichever communicator it waits for, so that one
  /// whose abort switch was just set gives up now; the others look at their flags and sleep again. Any thread.
  static void wake_sleepers();

  /// Whether flag waits yield the core while they spin (the default, safe where ranks share cores) or only poll.
  void set_yield(bool yield) { yield_ = yield; }
  bool yields() const { return yield_; }

 private:
  bool yield_ = true;
};

}  // namespace hiercoll::device
