// The CUDA device path (see device_path.hpp): a CudaQueue, pinned staging buffers, CUDA IPC peer memory and
// a host-mapped completion flag per communicator.
#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_queue.hpp"
#include "device/cuda/pinned_buffer.hpp"
#include "gpu/device_path.hpp"
#include "transport/cuda/ipc_peer_memory.hpp"

namespace hiercoll::gpu {

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

// Refuses a stream that is capturing a CUDA graph.
void refuse_capture(cudaStream_t stream, const std::string& what) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing", what);
  if (capture != cudaStreamCaptureStatusNone) {
    throw InvalidUsageError(what +
                            ": the stream is capturing a CUDA graph; hiercoll collectives are driven by a "
                            "host thread and cannot be captured (issue them outside the capture)");
  }
}

// Whether the device got past `event` (the end of a one-rank collective); throws CudaError if the device failed.
bool event_reached(cudaEvent_t event) {
  const cudaError_t err = cudaEventQuery(event);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  cudaGetLastError();
  check(err, "cudaEventQuery", "the end of a one-rank collective");
  return true;  // not reached: check() threw
}

// Watches the events of one-rank collectives (issue_alone) for the Works that someone waits for or attached a
// callback to, and calls them back, in the order they were asked for: one thread for the process, made at the
// first watch and never destroyed (a thread of its own because a progress thread makes no CUDA call; it may
// outlive every communicator, so none owns it). It polls the oldest event, yielding for 50 us (a one-rank copy
// takes a few), then sleeping a little longer each time, up to 200 us (the caller's stream may hold a backward
// pass ahead of the copy, and a DDP step waits for the end it hears of): as the progress thread waits for a
// done flag, at little CPU.
class EventWatcher {
 public:
  using Then = std::function<void(std::optional<base::Failure>)>;
  static EventWatcher& get() {
    static EventWatcher* watcher = new EventWatcher;  // never destroyed: its thread may run until the process ends
    return *watcher;
  }

  void add(int device, cudaEvent_t event, Then then) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
      watched_.push_back({device, event, std::move(then)});
    }
    wake_.notify_one();
  }

 private:
  struct Watched {
    int device;
    cudaEvent_t event;
    Then then;
  };

  void run() {
    int current = -1;  // this thread's device: its events' (no other CUDA context is made current by a query)
    for (;;) {
      Watched item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !watched_.empty(); });
        item = std::move(watched_.front());
        watched_.pop_front();
      }
      std::optional<base::Failure> failure;
      if (item.device != current && cudaSetDevice(item.device) == cudaSuccess) current = item.device;
      const auto start = std::chrono::steady_clock::now();
      base::Backoff<std::chrono::microseconds> naps(std::chrono::microseconds(20), std::chrono::microseconds(200));
      for (;;) {
        try {
          if (event_reached(item.event)) break;
        } catch (const Error& e) {
          failure = base::Failure::of(e);
          break;
        }
        if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(50)) {
          std::this_thread::yield();
          continue;
        }
        naps.pause();
      }
      try {
        item.then(std::move(failure));  // finishes a Work: its callbacks run on this thread
      } catch (const std::exception& e) {
        HIERCOLL_LOG(kWarn, "finishing a one-rank device collective failed: " << e.what());
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Watched> watched_;
  bool started_ = false;
};

class CudaDevicePath final : public DevicePath {
 public:
  CudaDevicePath(int device, size_t piece_bytes) : device_(device), piece_bytes_(piece_bytes), queue_(device) {
    DeviceGuard guard(device_);
    flags_.reserve(kFlagWords * sizeof(uint64_t));
    for (int i = 0; i < kFlagWords; ++i) static_cast<volatile uint64_t*>(flags_.data())[i] = 0;
    follow_event_ = new_event();  // last: a constructor that throws runs no destructor
  }

  ~CudaDevicePath() override {
    // Waits still queued (after a failure) give up; the queue then drains its stream. The flags stay: a kernel
    // that already read the abort word may still read them.
    queue_.abort();
    flags_.leak();
    for (cudaEvent_t event : released_) cudaEventDestroy(event);
    for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
    cudaEventDestroy(follow_event_);
  }

  int device() const override { return device_; }

  void follow_caller(StreamHandle stream, const std::string& what) override {
    DeviceGuard guard(device_);
    auto caller = static_cast<cudaStream_t>(stream);
    refuse_capture(caller, what);
    // One event serves every call: cudaStreamWaitEvent takes the work recorded so far, so the event may be
    // recorded again at the next call (saves an event create and destroy per call: docs/gpu.md).
    cudaError_t err = cudaEventRecord(follow_event_, caller);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(queue_.stream(), follow_event_, 0);
    check(err, "cudaEventRecord",
          what + ": on the caller's stream (is it a stream of device " + std::to_string(device_) + "?)");
  }

  device::Queue& queue() override { return queue_; }

  void* pinned(size_t bytes, int which) override {
    DeviceGuard guard(device_);
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
      const size_t shard_bytes = algo::network_staging_bytes(peers_->area_bytes(), local_size);
      for (int s = 0; s < algo::kHierBufferSets; ++s) {
        network_staging_[s].reserve(shard_bytes);
        memory_.network_staging[s] = static_cast<uint8_t*>(network_staging_[s].data());
      }
    }
    return memory_;
  }

  algo::DeferredStage deferred_stage(const device::WaitContext& limits) override {
    return algo::DeferredStage(queue_, flag(kToHost), flag(kFromHost), handoffs_, limits);
  }

  EventHandle complete(uint64_t ticket) override {
    DeviceGuard guard(device_);
    queue_.signal(flag(kDone).queue_side, ticket, 0);
    return record_event(queue_.stream(), "the operation's end");
  }

  EventHandle issue_alone(StreamHandle stream, void* out, const void* in, size_t bytes, const char* what) override {
    DeviceGuard guard(device_);
    auto caller = static_cast<cudaStream_t>(stream);
    refuse_capture(caller, what);
    if (bytes != 0 && out != in) device::cuda::device_copy(out, in, bytes, caller);
    return record_event(caller, what);
  }

  bool reached(EventHandle end) override { return event_reached(static_cast<cudaEvent_t>(end)); }

  void watch(EventHandle end, std::function<void(std::optional<base::Failure>)> then) override {
    EventWatcher::get().add(device_, static_cast<cudaEvent_t>(end), std::move(then));
  }

  void wait_done(uint64_t ticket, const device::WaitContext& context) override {
    queue_.host_wait(flag(kDone), ticket, context);
  }

  void order_caller_stream(StreamHandle stream, EventHandle end) override {
    DeviceGuard guard(device_);
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(end), 0),
          "cudaStreamWaitEvent", "Work::wait on the caller's stream");
  }

  void release(EventHandle end) override {
    // No CUDA call here: on the progress thread it could wait for a driver lock that a caller holds in a
    // blocking copy which waits for an operation only the progress thread can finish: the operation after the one
    // whose Work was dropped would hang now and then.
    if (end == nullptr) return;
    std::lock_guard<std::mutex> lock(released_mutex_);
    released_.push_back(static_cast<cudaEvent_t>(end));
  }

  void abort() override { queue_.abort(); }

 private:
  // Host-mapped flags, each on its own 128-byte line: the operations' done tickets, and the two directions of
  // the hand-offs between device work and host halves (algo::DeferredStage).
  enum Flag { kDone = 0, kToHost = 1, kFromHost = 2 };
  static constexpr int kFlagWords = 3 * 16;
  device::HostFlag flag(Flag which) const {
    const size_t at = static_cast<size_t>(which) * 16;
    return {static_cast<uint64_t*>(flags_.device_data()) + at, static_cast<uint64_t*>(flags_.data()) + at};
  }

  int device_;
  size_t piece_bytes_;
  device::cuda::CudaQueue queue_;
  device::cuda::PinnedBuffer flags_;
  uint64_t handoffs_ = 0;  // sequence numbers handed out on kToHost/kFromHost
  std::array<device::cuda::PinnedBuffer, 2> staging_;
  std::array<device::cuda::PinnedBuffer, algo::kHierBufferSets> network_staging_;
  std::unique_ptr<transport::cuda::IpcPeerMemory> peers_;
  algo::NodeMemory memory_;
  // An event recorded on `stream` now: one the Works gave back if there is one (no create and destroy per
  // operation). Caller's thread, under the device lock.
  cudaEvent_t record_event(cudaStream_t stream, const char* what) {
    {
      std::lock_guard<std::mutex> lock(released_mutex_);
      spare_events_.insert(spare_events_.end(), released_.begin(), released_.end());
      released_.clear();
    }
    cudaEvent_t event = nullptr;
    if (spare_events_.empty()) {
      event = new_event();
    } else {
      event = spare_events_.back();
      spare_events_.pop_back();
    }
    cudaError_t recorded = cudaEventRecord(event, stream);
    if (recorded != cudaSuccess) cudaEventDestroy(event);
    check(recorded, "cudaEventRecord", what);
    return event;
  }
  static cudaEvent_t new_event() {
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return event;
  }

  cudaEvent_t follow_event_ = nullptr;  // the caller's stream, recorded by follow_caller()
  std::mutex released_mutex_;
  std::vector<cudaEvent_t> released_;      // given back by Works (any thread), reused by the next record_event()
  std::vector<cudaEvent_t> spare_events_;  // record_event()'s, on the caller's thread under the device lock
};

}  // namespace

std::unique_ptr<DevicePath> DevicePath::create(int device, size_t piece_bytes) {
  return std::make_unique<CudaDevicePath>(device, piece_bytes);
}

}  // namespace hiercoll::gpu
