#include "device/host_queue.hpp"

#include <cstring>
#include <thread>

#include "hiercoll/errors.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::device {

namespace {

// Spins briefly, then sleeps, until `reached()` or the context's deadline or abort. `local_rank` names whom a
// timeout waited for (-1: the host half of the operation).
template <class Reached>
void poll(const WaitContext& context, Reached reached, int local_rank) {
  auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (!reached()) {
    auto now = std::chrono::steady_clock::now();
    if (context.aborted->load(std::memory_order_relaxed)) {
      throw RemoteError(context.what + ": the communicator was aborted");
    }
    if (now >= context.deadline) {
      const std::string who = local_rank < 0 ? "the queue" : "local rank " + std::to_string(local_rank);
      throw TimeoutError(context.what + ": " + who +
                         " never reached this step (did it die, or call another operation?)");
    }
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}
}  // namespace

void HostQueue::copy(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
}

void HostQueue::reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
                       ReduceOp op) {
  if (source_count == 1) return copy(dst, sources[0], count * dtype_size(type));
  reduce::reduce(dst, sources[0], sources[1], count, type, op);
  for (int k = 2; k < source_count; ++k) reduce::reduce(dst, dst, sources[k], count, type, op);
}

void HostQueue::divide(void* data, size_t count, DataType type, int divisor) {
  reduce::divide(data, count, type, divisor);
}

void HostQueue::signal(uint64_t* flag, uint64_t generation, uint64_t signature) {
  flag_word(flag, 1).store(signature, std::memory_order_relaxed);
  flag_word(flag, 0).store(generation, std::memory_order_release);
}

void HostQueue::wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                     const WaitContext& context) {
  for (int k = 0; k < flag_count; ++k) {
    poll(
        context, [&] { return flag_word(flags[k], 0).load(std::memory_order_acquire) >= generation; }, k);
    // The generation was published after the signature (release/acquire): this read sees this step's.
    if (signature != 0 && flag_word(flags[k], 1).load(std::memory_order_relaxed) != signature) {
      throw InvalidUsageError(context.what + ": local rank " + std::to_string(k) +
                              " called this operation with a different count, type or op");
    }
  }
}

void HostQueue::host_wait(const HostFlag& flag, uint64_t value, const WaitContext& context) {
  poll(
      context, [&] { return flag_word(flag.host_side, 0).load(std::memory_order_acquire) >= value; }, -1);
}

}  // namespace hiercoll::device
