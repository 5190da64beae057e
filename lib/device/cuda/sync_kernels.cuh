#pragma once
// Flag kernels of the CUDA queue (see device/queue.hpp for what a flag is). They order work between
// ranks on the device: no host thread takes part once they are enqueued.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hiercoll::device::cuda {

inline constexpr int kMaxWaitFlags = 64;

/// Why a device-side wait gave up; written once into the queue's status words (host-mapped memory).
enum WaitStatus : uint32_t { kWaitOk = 0, kWaitTimeout = 1, kWaitMismatch = 2, kWaitAborted = 3 };

struct WaitArgs {
  const uint64_t* flags[kMaxWaitFlags];  ///< device-addressable (own, IPC-mapped or host-mapped memory)
  int flag_count;
  uint64_t generation;
  uint64_t signature;              ///< 0: not checked
  uint64_t budget_ns;              ///< give up after this long (measured on the device's global timer)
  const volatile uint32_t* abort;  ///< host-mapped: non-zero makes every wait give up
  uint32_t* status;                ///< host-mapped: [0] WaitStatus, [1] wait id, [2] flag index
  uint32_t wait_id;
};

/// Loads the two kernels below into the current device's context (see reduce::cuda::load_kernels for why).
void load_sync_kernels();
/// flag[1] = signature, then flag[0] = generation, visible system-wide after all earlier work of the stream.
void enqueue_signal(uint64_t* flag, uint64_t generation, uint64_t signature, cudaStream_t stream);
/// Later work on `stream` starts once every flag reached `generation` (or the wait gave up, see status).
void enqueue_wait(const WaitArgs& args, cudaStream_t stream);

}  // namespace hiercoll::device::cuda
