#include "device/cuda/cuda_queue.hpp"

#include <cuda.h>  // types of the driver entry point only: no link with libcuda

#include <algorithm>
#include <thread>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/sync_kernels.cuh"
#include "reduce/cuda/reduce_cuda.hpp"

namespace hiercoll::device::cuda {

namespace {

uint64_t budget_ns(const WaitContext& context) {
  auto left = context.deadline - std::chrono::steady_clock::now();
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count()));
}

volatile uint32_t* words(const PinnedBuffer& control) { return static_cast<volatile uint32_t*>(control.data()); }

// The driver's stream write (cuStreamWriteValue64), found once through the runtime; null where the driver does
// not offer it. Its default flags fence the stream's earlier writes before the value, as the signal kernel does
// with __threadfence_system(), and it costs the host less than a kernel launch (bench/cuda/call_cost.cpp).
using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
WriteValue64 stream_write_value() {
  static const WriteValue64 found = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &entry, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return WriteValue64{nullptr};
    }
    return reinterpret_cast<WriteValue64>(entry);
  }();
  return found;
}

CUdeviceptr address(const void* pointer) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer)); }

}  // namespace

CudaQueue::CudaQueue(int device) : device_(device) {
  DeviceGuard guard(device_);
  // Every kernel this queue launches is loaded now, before any flag wait can spin (lazy loading, see
  // reduce_cuda.hpp). Loading is per context and cheap once done, so each queue simply asks again.
  load_sync_kernels();
  reduce::cuda::load_kernels();
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  try {
    control_.reserve(64);
  } catch (...) {
    cudaStreamDestroy(stream_);  // a constructor that throws runs no destructor
    throw;
  }
  for (int i = 0; i < 16; ++i) words(control_)[i] = 0;
  // Stream writes where the driver takes them on this device (tried once on a word of our own), else the kernel.
  if (WriteValue64 write = stream_write_value()) {
    if (write(stream_, address(static_cast<uint64_t*>(control_.device_data()) + 4), 0, 0) == CUDA_SUCCESS) {
      write_value_ = reinterpret_cast<void*>(write);
    }
  }
}

CudaQueue::~CudaQueue() {
  // Nothing may spin after the queue is gone: release waits, then let the stream drain.
  abort();
  DeviceGuard guard(device_);
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
  control_.leak();  // the abort word: waits queued on callers' streams may still read it
}

namespace {

// Copies up to this size between device buffers are kernels: a launch costs the host less than cudaMemcpyAsync
// (bench/cuda/call_cost.cpp, docs/gpu.md), and small collectives are made of such calls. Larger ones go to the
// copy engines.
constexpr size_t kKernelCopyBytes = 256 << 10;

bool on_device(const void* pointer) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice;
}

}  // namespace

void device_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes <= kKernelCopyBytes) {
    reduce::cuda::copy(dst, src, bytes, stream);  // checks its launch
    return;
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
}

void CudaQueue::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  // Device memory only (a pointer query each, cheap: docs/gpu.md): pinned host memory stays with the copy engines,
  // whose writes the hand-off flags were designed around.
  if (bytes <= kKernelCopyBytes && on_device(dst) && on_device(src)) {
    device_copy(dst, src, bytes, stream_);
    return;
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
}

void CudaQueue::reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
                       ReduceOp op) {
  reduce::cuda::reduce_many(dst, sources, source_count, count, type, op, stream_);
}

void CudaQueue::reduce_to_both(void* shared, void* mine, const void* const* sources, int source_count, size_t count,
                               DataType type, ReduceOp op) {
  // Not on the device path's schedules (allreduce_hier reduces into both on host memory only): a reduce, then a copy.
  reduce(shared, sources, source_count, count, type, op);
  copy(mine, shared, count * dtype_size(type));
}

void CudaQueue::divide(void* data, size_t count, DataType type, int divisor) {
  reduce::cuda::divide(data, count, type, divisor, stream_);
}

void CudaQueue::signal(uint64_t* flag, uint64_t generation, uint64_t signature) {
  if (write_value_) {
    // The signature first, then the generation that a wait compares with: each write is fenced after the
    // stream's earlier ones, as in the signal kernel.
    auto write = reinterpret_cast<WriteValue64>(write_value_);
    CUresult rc = CUDA_SUCCESS;
    if (signature != 0) rc = write(stream_, address(flag + 1), signature, 0);
    if (rc == CUDA_SUCCESS) rc = write(stream_, address(flag), generation, 0);
    if (rc != CUDA_SUCCESS) throw CudaError("cuStreamWriteValue64 (a flag signal): driver error " + std::to_string(rc));
    return;
  }
  enqueue_signal(flag, generation, signature, stream_);
}

uint32_t CudaQueue::name_wait(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Keep the names of recent waits only: a failed wait is reported within one operation.
  while (wait_names_.size() > 4096) wait_names_.erase(wait_names_.begin());
  wait_names_[next_wait_] = what;
  return next_wait_++;
}

WaitArgs CudaQueue::wait_args(const uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                              const WaitContext& context) {
  if (flag_count > kMaxWaitFlags) {
    throw InvalidUsageError(context.name() + ": " + std::to_string(flag_count) + " local ranks; device flag waits take " +
                            std::to_string(kMaxWaitFlags) + " at most");
  }
  WaitArgs args{};
  for (int k = 0; k < flag_count; ++k) args.flags[k] = flags[k];
  args.flag_count = flag_count;
  args.generation = generation;
  args.signature = signature;
  args.budget_ns = budget_ns(context);
  args.abort = static_cast<const volatile uint32_t*>(control_.device_data()) + 4;
  args.status = static_cast<uint32_t*>(control_.device_data());
  args.wait_id = name_wait(context.name());
  return args;
}

void CudaQueue::wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                     const WaitContext& context) {
  enqueue_wait(wait_args(flags, flag_count, generation, signature, context), stream_);
}

void CudaQueue::follow(cudaEvent_t event) { check(cudaStreamWaitEvent(stream_, event, 0), "cudaStreamWaitEvent"); }

void CudaQueue::host_wait(const HostFlag& flag, uint64_t value, const WaitContext& context) {
  // Host memory only (see the header): a volatile read of the mapped word, the status words, the clock. The device's
  // store wakes no one, so the wait polls, yielding the core at every poll: a fixed nap would add up to its length
  // to every piece the device hands over.
  while (flag_word(flag.host_side, 0).load(std::memory_order_acquire) < value) {
    check_status();  // a device-side wait gave up: the flag may never come
    auto now = std::chrono::steady_clock::now();
    if (context.aborted->load(std::memory_order_relaxed)) {
      abort();
      throw RemoteError(context.name() + ": the communicator was aborted");
    }
    // The device waits have budgets of their own; this one guards against work that never arrives.
    if (now >= context.deadline + std::chrono::seconds(5)) {
      abort();
      throw TimeoutError(context.name() + ": the device did not reach this step by the deadline");
    }
    std::this_thread::yield();
  }
  check_status();
}

void CudaQueue::check_status() {
  volatile uint32_t* status = words(control_);
  const uint32_t code = status[0];
  if (code == kWaitOk) return;
  const uint32_t wait_id = status[1], index = status[2];
  std::string what;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = wait_names_.find(wait_id);
    what = it == wait_names_.end() ? std::string("a device-side wait") : it->second;
  }
  const std::string who = "local rank " + std::to_string(index);
  switch (code) {
    case kWaitTimeout:
      throw TimeoutError(what + ": " + who + " never reached this step (did it die, or call another operation?)");
    case kWaitMismatch:
      throw InvalidUsageError(what + ": " + who + " called this operation with a different count, type or op");
    default: throw RemoteError(what + ": the communicator was aborted");
  }
}

void CudaQueue::abort() { words(control_)[4] = 1; }

}  // namespace hiercoll::device::cuda
