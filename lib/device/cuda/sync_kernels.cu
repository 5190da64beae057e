#include <string>

#include "device/cuda/sync_kernels.cuh"
#include "hiercoll/errors.hpp"

namespace hiercoll::device::cuda {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Phases: (1) publish the signature; (2) a system-scope fence, so this stream's earlier writes (copies and
// kernels before this one have completed) and the signature are visible before (3) the generation is stored.
__global__ void signal_kernel(uint64_t* flag, uint64_t generation, uint64_t signature) {
  volatile uint64_t* words = flag;
  words[1] = signature;
  __threadfence_system();
  words[0] = generation;
  __threadfence_system();
}

// One thread per flag spins with volatile loads (no caching) until its flag reaches the generation; it gives
// up on the abort word, on another wait of this queue having failed, or when its time budget is spent, and
// reports the first failure in the status words. Then the block checks signatures and fences so that later
// work reads what the peers wrote before signalling.
__global__ void wait_kernel(WaitArgs args) {
  const int k = threadIdx.x;
  if (k < args.flag_count) {
    const volatile uint64_t* flag = args.flags[k];
    const uint64_t start = global_timer_ns();
    uint32_t failure = kWaitOk;
    unsigned polls = 0;
    while (flag[0] < args.generation) {
      if ((++polls & 1023u) != 0) continue;
      if (*args.abort != 0) failure = kWaitAborted;
      else if (*reinterpret_cast<volatile uint32_t*>(args.status) != kWaitOk) failure = kWaitAborted;
      else if (global_timer_ns() - start > args.budget_ns) failure = kWaitTimeout;
      if (failure != kWaitOk) break;
    }
    if (failure == kWaitOk && args.signature != 0 && flag[1] != args.signature) failure = kWaitMismatch;
    // Plain stores, not a system-scope CAS: atomics on host memory need hardware most PCIe hosts lack. Two
    // threads failing at once may both write; either's report is true.
    volatile uint32_t* status = args.status;
    if (failure != kWaitOk && status[0] == kWaitOk) {
      status[1] = args.wait_id;
      status[2] = static_cast<uint32_t>(k);
      __threadfence_system();
      status[0] = failure;
      __threadfence_system();
    }
  }
  __syncthreads();
  __threadfence_system();
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void load_sync_kernels() {
  cudaFuncAttributes attributes{};
  for (cudaError_t err :
       {cudaFuncGetAttributes(&attributes, signal_kernel), cudaFuncGetAttributes(&attributes, wait_kernel)}) {
    if (err != cudaSuccess) throw CudaError(std::string("loading the flag kernels: ") + cudaGetErrorString(err));
  }
}

void enqueue_signal(uint64_t* flag, uint64_t generation, uint64_t signature, cudaStream_t stream) {
  signal_kernel<<<1, 1, 0, stream>>>(flag, generation, signature);
  check_launch("signal kernel launch");
}

void enqueue_wait(const WaitArgs& args, cudaStream_t stream) {
  if (args.flag_count < 1 || args.flag_count > kMaxWaitFlags) {
    throw InvalidUsageError("wait kernel: " + std::to_string(args.flag_count) + " flags (1.." +
                            std::to_string(kMaxWaitFlags) + " allowed)");
  }
  wait_kernel<<<1, 64, 0, stream>>>(args);
  check_launch("wait kernel launch");
}

}  // namespace hiercoll::device::cuda
