#include "device/cuda/cuda_queue.hpp"

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

}  // namespace

CudaQueue::CudaQueue(int device) : device_(device) {
  DeviceGuard guard(device_);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  control_.reserve(64);
  for (int i = 0; i < 16; ++i) words(control_)[i] = 0;
}

CudaQueue::~CudaQueue() {
  // Nothing may spin after the queue is gone: release waits, then let the stream drain.
  abort();
  DeviceGuard guard(device_);
  cudaStreamSynchronize(stream_);
  for (auto& [marker, event] : markers_) cudaEventDestroy(event);
  cudaStreamDestroy(stream_);
  control_.leak();  // the abort word: waits queued on callers' streams may still read it
}

void CudaQueue::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
}

void CudaQueue::reduce(void* dst, const void* const* sources, int source_count, size_t count, DataType type,
                       ReduceOp op) {
  reduce::cuda::reduce_many(dst, sources, source_count, count, type, op, stream_);
}

void CudaQueue::divide(void* data, size_t count, DataType type, int divisor) {
  reduce::cuda::divide(data, count, type, divisor, stream_);
}

void CudaQueue::signal(uint64_t* flag, uint64_t generation, uint64_t signature) {
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
    throw InvalidUsageError(context.what + ": " + std::to_string(flag_count) + " local ranks; device flag waits take " +
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
  args.wait_id = name_wait(context.what);
  return args;
}

void CudaQueue::wait(uint64_t* const* flags, int flag_count, uint64_t generation, uint64_t signature,
                     const WaitContext& context) {
  enqueue_wait(wait_args(flags, flag_count, generation, signature, context), stream_);
}

void CudaQueue::wait_on(cudaStream_t other, uint64_t* flag, uint64_t generation, const WaitContext& context) {
  void* device_flag = nullptr;
  check(cudaHostGetDevicePointer(&device_flag, flag, 0), "cudaHostGetDevicePointer", "completion flag");
  const uint64_t* flags[] = {static_cast<const uint64_t*>(device_flag)};
  enqueue_wait(wait_args(flags, 1, generation, 0, context), other);
}

void CudaQueue::follow(cudaEvent_t event) { check(cudaStreamWaitEvent(stream_, event, 0), "cudaStreamWaitEvent"); }

Marker CudaQueue::mark() {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t recorded = cudaEventRecord(event, stream_);
  if (recorded != cudaSuccess) cudaEventDestroy(event);
  check(recorded, "cudaEventRecord");
  std::lock_guard<std::mutex> lock(mutex_);
  markers_[next_marker_] = event;
  return next_marker_++;
}

void CudaQueue::wait_host(Marker marker, const WaitContext& context) {
  DeviceGuard guard(device_);  // the helper thread calls this too
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = markers_.find(marker);
    if (it == markers_.end()) throw InternalError(context.what + ": unknown queue marker " + std::to_string(marker));
    event = it->second;
  }
  auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (;;) {
    cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) check(state, "cudaEventQuery", context.what);
    auto now = std::chrono::steady_clock::now();
    if (context.aborted->load(std::memory_order_relaxed)) {
      abort();
      throw RemoteError(context.what + ": the communicator was aborted");
    }
    // The device waits have their own budgets; this one only guards against a stream that never drains.
    if (now >= context.deadline + std::chrono::seconds(5)) {
      abort();
      throw TimeoutError(context.what + ": device work did not finish by the deadline");
    }
    if (now < spin_until) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  {
    // Events complete in stream order: this marker and every earlier one are done.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = markers_.begin(); it != markers_.end() && it->first <= marker;) {
      cudaEventDestroy(it->second);
      it = markers_.erase(it);
    }
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
