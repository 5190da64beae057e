#pragma once
// CudaQueue: the Queue of device memory. Work goes onto one internal non-blocking stream of one device (it
// never synchronises with the legacy default stream, so a caller's cudaMemcpy cannot stall behind a flag
// wait). Flag waits are kernels that spin on peers' flags with a time budget; the first one to give up
// records why in host-mapped status words, every later wait then gives up at once, and host_wait() turns
// the record into an exception.
//
// Threads: one thread at a time enqueues (the caller's, under the communicator's device lock); host_wait() and
// abort() touch host memory only, never the CUDA API, so the progress thread can run them while another thread
// is inside a blocking CUDA call (see gpu/device_path.hpp for why that matters).
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda/pinned_buffer.hpp"
#include "device/cuda/sync_kernels.cuh"
#include "device/queue.hpp"

namespace hiercoll::device::cuda {

/// dst = src, both device memory, on `stream`: a kernel for small copies (it costs the host less than
/// cudaMemcpyAsync), the copy engines for larger ones.
void device_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

class CudaQueue final : public Queue {
 public:
  explicit CudaQueue(int device);
  ~CudaQueue() override;
  CudaQueue(const CudaQueue&) = delete;
  CudaQueue& operator=(const CudaQueue&) = delete;

  MemoryKind kind() const override { return MemoryKind::kDevice; }
  void copy(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
              ReduceOp op) override;
  void reduce_to_both(void* shared, void* mine, const void* const* sources, int source_count, size_t count,
                      DataType type, ReduceOp op) override;
  void divide(void* data, size_t count, DataType type, int divisor) override;
  void signal(uint64_t* flag, uint64_t generation, uint64_t signature) override;
  void wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
            const WaitContext& context) override;
  void host_wait(const HostFlag& flag, uint64_t value, const WaitContext& context) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  /// Work enqueued from now on starts after `event` (recorded on a caller's stream).
  void follow(cudaEvent_t event);
  /// Makes every device-side wait, queued or running, give up: nothing spins on after an abort.
  void abort();
  /// Throws if a device-side wait has given up (the queue is then unusable).
  void check_status();

 private:
  uint32_t name_wait(const std::string& what);
  WaitArgs wait_args(const uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                     const WaitContext& context);

  int device_;
  cudaStream_t stream_ = nullptr;
  PinnedBuffer control_;  // uint32 [0..2] status words (see sync_kernels.cuh), [4] abort word, [8..9] write probe
  std::mutex mutex_;                            // guards wait_names_: check_status() runs on the progress thread
  std::map<uint32_t, std::string> wait_names_;  // what each wait was for, to name a failed one
  uint32_t next_wait_ = 1;
  void* write_value_ = nullptr;  // cuStreamWriteValue64 where the driver offers it: signals without a kernel
};

}  // namespace hiercoll::device::cuda
