#pragma once
// DevicePath: what a communicator needs to run collectives on CUDA device buffers, behind a header without
// CUDA types (gpu/device_path_cuda.cpp implements it; builds without HIERCOLL_WITH_CUDA get
// device_path_none.cpp, where every pointer is host memory).
//
// Life of a device collective, like an NCCL call: on the caller's thread, under the communicator's device lock,
// the internal stream is ordered after the caller's (follow_caller), the algorithm enqueues ALL of the
// operation's device work (complete() marks its end with an event), and Work::wait() makes the caller's stream
// wait for that event. What needs the host (the network phase, a host algorithm on staged copies) is the
// operation's host half: the progress thread runs it later, meeting the device work through host-mapped flags
// (algo::DeferredStage), then waits for the operation's done flag.
//
// Why every CUDA call happens at issue time: a caller thread inside a blocking CUDA call (a copy to pageable
// memory, cudaFree, cudaMalloc) may hold the driver's locks until the device gets past work the caller's stream
// waits for. If the progress thread still had to call CUDA to let that work finish, neither could go on: a hang
// until the wait budgets run out. So the progress thread touches host memory only.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algo/hierarchy.hpp"
#include "algo/network_stage.hpp"
#include "base/failure.hpp"
#include "device/queue.hpp"

namespace hiercoll::gpu {

/// Where a buffer lives.
struct Location {
  device::MemoryKind kind = device::MemoryKind::kHost;
  int device = -1;  ///< CUDA device ordinal, for device memory
};

/// Host memory, or which device: CUDA's pointer attributes where built with CUDA and a device is present.
Location locate(const void* pointer);
/// True if this build has the CUDA device path.
bool device_path_built();

/// Opaque CUDA objects (cudaStream_t, cudaEvent_t) as the communicator carries them.
using StreamHandle = void*;
using EventHandle = void*;

class DevicePath {
 public:
  /// For device buffers on `device`. `piece_bytes` sizes the peer memory's areas (HIERCOLL_CUDA_PIECE_BYTES).
  static std::unique_ptr<DevicePath> create(int device, size_t piece_bytes);
  virtual ~DevicePath() = default;
  virtual int device() const = 0;

  // ---- Caller's thread, one at a time (the communicator's device lock) ----
  /// Refuses a `stream` that is capturing a CUDA graph (InvalidUsageError); work enqueued from now on starts
  /// after the work the caller's stream holds now.
  virtual void follow_caller(StreamHandle stream, const std::string& what) = 0;
  virtual device::Queue& queue() = 0;
  /// Pinned host memory of at least `bytes`; `which` picks one of a few independent buffers. A buffer that grows
  /// keeps its old memory alive, so host halves of earlier operations may still use it.
  virtual void* pinned(size_t bytes, int which) = 0;
  /// The node's peer memory for device buffers, made at the first call: local ranks swap IPC handles through
  /// `exchange`, which publishes this rank's handle and returns every local rank's, in local-rank order.
  using Exchange = std::function<std::vector<std::vector<uint8_t>>(const std::vector<uint8_t>& mine)>;
  virtual algo::NodeMemory& node_memory(int local_rank, int local_size, bool network, const Exchange& exchange) = 0;
  /// Hands pieces between this path's queue and an operation's host half; `limits` bound the device's waits.
  virtual algo::DeferredStage deferred_stage(const device::WaitContext& limits) = 0;
  /// After the operation's work: publishes `ticket` on the done flag once the device gets there, and returns an
  /// event at the same point for Work::wait (release it with release()).
  virtual EventHandle complete(uint64_t ticket) = 0;

  // ---- A communicator of one rank: caller's thread, under the device lock ----
  /// Alone, a collective is `bytes` of `in` copied to `out` (nothing at all in place), enqueued on the caller's
  /// `stream` itself, as NCCL does: no internal stream, no done flag, no progress thread. Returns an event after
  /// it on that stream (for reached()/watch(); give it back with release()). Refuses a capturing stream as
  /// follow_caller() does.
  virtual EventHandle issue_alone(StreamHandle stream, void* out, const void* in, size_t bytes, const char* what) = 0;

  // ---- Not a progress thread (these call CUDA) ----
  /// Did the device get past `end` (from issue_alone)? Does not block; throws CudaError if the device failed.
  virtual bool reached(EventHandle end) = 0;
  /// Calls `then` once the device got past `end`, on a watcher thread of the process (polls, then sleeps).
  virtual void watch(EventHandle end, std::function<void(std::optional<base::Failure>)> then) = 0;

  // ---- Progress thread: host memory only ----
  /// Blocks until the device published `ticket`; throws what a device-side wait failed with, or TimeoutError.
  virtual void wait_done(uint64_t ticket, const device::WaitContext& context) = 0;

  // ---- Any thread ----
  /// `stream` waits on the device for `end` (from complete()); a caller's thread (Work::wait).
  virtual void order_caller_stream(StreamHandle stream, EventHandle end) = 0;
  /// Gives `end` back, without a CUDA call: the last owner of a Work may be the progress thread. The event is
  /// destroyed by a later complete(), on a caller's thread.
  virtual void release(EventHandle end) = 0;
  /// Makes every device-side wait, queued or running, give up (a failed operation, communicator abort).
  virtual void abort() = 0;
};

}  // namespace hiercoll::gpu
