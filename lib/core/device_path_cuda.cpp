// The CUDA device path (see device_path.hpp): a CudaQueue, pinned staging buffers, CUDA IPC peer memory and
// a host-mapped completion flag per communicator.
#include <cuda_runtime_api.h>

#include <array>

#include "core/device_path.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_queue.hpp"
#include "device/cuda/pinned_buffer.hpp"
#include "transport/cuda/ipc_peer_memory.hpp"

namespace hiercoll::core {

using device::cuda::check;
using device::cuda::DeviceGuard;

Location locate(const void* pointer) {
  // Asked once: without a driver or a device every pointer is host memory, and asking again costs each call.
  static const bool have_devices = [] {
    int devices = 0;
    bool found = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    cudaGetLastError();
    return found;
  }();
  if (pointer == nullptr || !have_devices) return {};
  cudaPointerAttributes attributes{};
  cudaError_t err = cudaPointerGetAttributes(&attributes, pointer);
  if (err != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for host buffers; clear it
    return {};
  }
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) {
    return {device::MemoryKind::kDevice, attributes.device};
  }
  return {};  // pageable or pinned host memory
}

bool device_path_built() { return true; }

namespace {

class CudaDevicePath final : public DevicePath {
 public:
  CudaDevicePath(int device, size_t piece_bytes) : device_(device), piece_bytes_(piece_bytes), queue_(device) {
    completion_.reserve(64);
    static_cast<volatile uint64_t*>(completion_.data())[0] = 0;
    static_cast<volatile uint64_t*>(completion_.data())[1] = 0;
  }

  ~CudaDevicePath() override {
    // Caller streams may still hold waits for tickets that will never come: let them go, and keep the word they
    // read alive (a wait queued behind a caller's long kernel may run after this communicator is gone).
    queue_.abort();
    completion_.leak();
  }

  int device() const override { return device_; }

  EventHandle order_after_caller(StreamHandle stream, const std::string& what) override {
    DeviceGuard guard(device_);
    auto caller = static_cast<cudaStream_t>(stream);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(caller, &capture), "cudaStreamIsCapturing", what);
    if (capture != cudaStreamCaptureStatusNone) {
      throw InvalidUsageError(what +
                              ": the stream is capturing a CUDA graph; hiercoll collectives are driven by a "
                              "host thread and cannot be captured (issue them outside the capture)");
    }
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags", what);
    cudaError_t recorded = cudaEventRecord(event, caller);
    if (recorded != cudaSuccess) cudaEventDestroy(event);
    check(recorded, "cudaEventRecord",
          what + ": on the caller's stream (is it a stream of device " + std::to_string(device_) + "?)");
    return event;
  }

  void discard(EventHandle event) override {
    if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  void begin(EventHandle event) override {
    check(cudaSetDevice(device_), "cudaSetDevice");  // the progress thread may serve several devices' calls
    queue_.check_status();
    queue_.follow(static_cast<cudaEvent_t>(event));
    discard(event);  // released once the wait recorded above has happened
  }

  device::Queue& queue() override { return queue_; }

  void* pinned(size_t bytes, int which) override {
    auto& buffer = staging_.at(static_cast<size_t>(which));
    buffer.reserve(bytes);
    return buffer.data();
  }

  algo::NodeMemory& node_memory(int local_rank, int local_size, bool network, const Exchange& exchange) override {
    if (peers_) return memory_;
    peers_ = std::make_unique<transport::cuda::IpcPeerMemory>(device_, local_rank, local_size, algo::kHierBufferSets,
                                                              piece_bytes_);
    peers_->connect(exchange(peers_->handle()));
    memory_.peers = peers_.get();
    memory_.queue = &queue_;
    if (network) {
      // The inter-node phase of a slot works on one shard of a piece: area / L rounded up to whole cache lines.
      const size_t shard_bytes = peers_->area_bytes() / static_cast<size_t>(local_size) + 128;
      for (int s = 0; s < algo::kHierBufferSets; ++s) {
        network_staging_[s].reserve(shard_bytes);
        memory_.network_staging[s] = static_cast<uint8_t*>(network_staging_[s].data());
      }
    }
    return memory_;
  }

  void finish(uint64_t ticket, const device::WaitContext& context, bool failed) override {
    if (failed) queue_.abort();  // nothing may spin on for an operation that is over
    std::exception_ptr error;
    try {
      queue_.wait_host(queue_.mark(), context);
    } catch (...) {
      error = std::current_exception();
    }
    // Published even on failure: a caller stream must never wait forever. The error reaches the caller
    // through the Work and the now broken communicator.
    static_cast<volatile uint64_t*>(completion_.data())[0] = ticket;
    if (error && !failed) std::rethrow_exception(error);
  }

  void order_caller_stream(StreamHandle stream, uint64_t ticket, std::chrono::milliseconds timeout) override {
    DeviceGuard guard(device_);
    std::atomic<bool> never{false};
    const device::WaitContext context{std::chrono::steady_clock::now() + timeout, &never,
                                      "Work::wait on the caller's stream for operation " + std::to_string(ticket)};
    queue_.wait_on(static_cast<cudaStream_t>(stream), static_cast<uint64_t*>(completion_.data()), ticket, context);
  }

  void abort() override { queue_.abort(); }

 private:
  int device_;
  size_t piece_bytes_;
  device::cuda::CudaQueue queue_;
  device::cuda::PinnedBuffer completion_;  // [0]: ticket of the last finished operation, [1]: signature (unused)
  std::array<device::cuda::PinnedBuffer, 3> staging_;
  std::array<device::cuda::PinnedBuffer, algo::kHierBufferSets> network_staging_;
  std::unique_ptr<transport::cuda::IpcPeerMemory> peers_;
  algo::NodeMemory memory_;
};

}  // namespace

std::unique_ptr<DevicePath> DevicePath::create(int device, size_t piece_bytes) {
  return std::make_unique<CudaDevicePath>(device, piece_bytes);
}

}  // namespace hiercoll::core
