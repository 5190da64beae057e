#pragma once
// Queue: an ordered stream of data-movement work on one kind of memory, the only thing algorithms that run
// on device buffers see of CUDA. Every call enqueues and returns; the work runs in call order, like a CUDA
// stream. HostQueue runs each call at once on the calling thread (host memory); CudaQueue enqueues on a
// CUDA stream (device memory, CUDA-IPC-mapped peer memory, pinned host memory).
//
// Flags are two 64-bit words in memory every local rank can address: [0] a generation that only grows,
// [1] the signature of the operation that wrote it. Each flag that signal() and wait() take has a cache line of its
// own (64 bytes, 64-byte aligned): HostQueue counts the threads asleep on it in [2]. They order work between ranks of a node without a
// host round trip on the device: signal() publishes after all earlier work, wait() holds back later work.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "hiercoll/types.hpp"

namespace hiercoll::device {

/// Where a pointer lives, as far as hiercoll cares.
enum class MemoryKind { kHost, kDevice };

/// Limits of one wait: the operation's deadline, its abort switch, and its name for errors.
struct WaitContext {
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* aborted;
  std::string what;
  /// The step of the operation `what` that waits ("intra-node broadcast"), or null. Kept apart and joined only
  /// when a name is needed: a call that fails rarely should not build one (a string allocated per call showed in a
  /// small broadcast's profile).
  const char* phase = nullptr;
  /// What an error of this wait names: `what`, then the phase.
  std::string name() const { return phase == nullptr ? what : what + " " + phase; }
};

/// A counter in host memory that both a queue's work and host threads reach (pinned and mapped for CudaQueue):
/// the queue's work signal()s and wait()s on `queue_side`, host threads read and write `host_side`. Two words,
/// like every flag (generation, signature).
struct HostFlag {
  uint64_t* queue_side = nullptr;
  uint64_t* host_side = nullptr;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "flags in shared or mapped memory must be lock-free");
/// Word `index` of a flag, as host threads access it.
inline std::atomic<uint64_t>& flag_word(uint64_t* flag, int index) {
  return reinterpret_cast<std::atomic<uint64_t>*>(flag)[index];
}

/// Host side of a HostFlag: publishes `value` to the queue's waits (release: host writes before it are seen).
inline void host_signal(const HostFlag& flag, uint64_t value) {
  flag_word(flag.host_side, 0).store(value, std::memory_order_release);
}

class Queue {
 public:
  virtual ~Queue() = default;
  virtual MemoryKind kind() const = 0;

  /// dst <- src; either side may be host (pinned, for CudaQueue) or device memory. Ranges must not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// copy() into lines other ranks read next (a node's shared areas): where stores to lines another core holds are
  /// slow, the host queue writes them past the caches (reduce::publish).
  virtual void publish(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }
  /// dst[i] = sources[0][i] op sources[1][i] op ... (in that order). dst may be sources[0] exactly, no other source.
  virtual void reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
                      ReduceOp op) = 0;
  /// reduce() into `shared`, which the node's other ranks read next, and into `mine`, this rank's own memory, in one
  /// pass over the sources. `mine` may be one of the sources exactly.
  virtual void reduce_to_both(void* shared, void* mine, const void* const* sources, int source_count, size_t count,
                              DataType type, ReduceOp op) = 0;
  /// data[i] /= divisor (floating types).
  virtual void divide(void* data, size_t count, DataType type, int divisor) = 0;

  /// After everything enqueued so far: flag[1] = signature, then flag[0] = generation (release).
  virtual void signal(uint64_t* flag, uint64_t generation, uint64_t signature) = 0;
  /// Work enqueued later starts once every flags[k][0] >= generation. A flag whose signature differs from
  /// `signature` (non-zero) fails the queue with InvalidUsageError naming local rank k; a flag that stays
  /// behind past the deadline fails it with TimeoutError. A CudaQueue takes at most kMaxWaitFlags (64) flags
  /// (device/cuda/sync_kernels.cuh) and refuses more with InvalidUsageError; a HostQueue any number.
  virtual void wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                    const WaitContext& context) = 0;

  /// Host side of a HostFlag: blocks the calling thread until `flag` reaches `value` (acquire), throwing what a
  /// wait of this queue failed with, RemoteError on abort, or TimeoutError at the deadline. Any thread.
  virtual void host_wait(const HostFlag& flag, uint64_t value, const WaitContext& context) = 0;
};

}  // namespace hiercoll::device
