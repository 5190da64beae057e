#pragma once
// DevicePath: what a communicator needs to run collectives on CUDA device buffers, behind a header without
// CUDA types (core/device_path_cuda.cpp implements it; builds without HIERCOLL_WITH_CUDA get
// device_path_none.cpp, where every pointer is host memory).
//
// Life of a device collective, like ProcessGroupNCCL's: on the caller's thread, order_after_caller() records
// where the caller's stream is; on the progress thread, begin() makes the internal stream wait for that, the
// algorithm enqueues its work on queue(), and finish() waits for the device to run it and publishes the
// operation's ticket in host-mapped memory. Work::wait() enqueues on the caller's stream a wait for that
// ticket (order_caller_stream), so the caller's later kernels see the result and its host thread goes on.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algo/hierarchy.hpp"
#include "device/queue.hpp"

namespace hiercoll::core {

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

  /// Caller's thread. Throws InvalidUsageError if `stream` is capturing a CUDA graph. Returns an event the
  /// progress thread passes to begin() (begin() or discard() takes ownership).
  virtual EventHandle order_after_caller(StreamHandle stream, const std::string& what) = 0;
  virtual void discard(EventHandle event) = 0;

  /// Progress thread: later work of this operation starts after `event`.
  virtual void begin(EventHandle event) = 0;
  virtual device::Queue& queue() = 0;
  /// Pinned host memory of at least `bytes`; `which` picks one of a few independent buffers.
  virtual void* pinned(size_t bytes, int which) = 0;
  /// The node's peer memory for device buffers, made at the first call: local ranks swap IPC handles through
  /// `exchange`, which publishes this rank's handle and returns every local rank's, in local-rank order.
  using Exchange = std::function<std::vector<std::vector<uint8_t>>(const std::vector<uint8_t>& mine)>;
  virtual algo::NodeMemory& node_memory(int local_rank, int local_size, bool network, const Exchange& exchange) = 0;
  /// Progress thread, after the operation's work was enqueued (or it failed): waits for the device to drain,
  /// then publishes `ticket` so caller streams waiting for it go on. Rethrows a device-side wait's failure.
  virtual void finish(uint64_t ticket, const device::WaitContext& context, bool failed) = 0;

  /// Any thread: `stream` waits on the device until `ticket` was published (never longer than `timeout`).
  virtual void order_caller_stream(StreamHandle stream, uint64_t ticket, std::chrono::milliseconds timeout) = 0;
  /// Any thread: releases every device-side wait (communicator abort).
  virtual void abort() = 0;
};

}  // namespace hiercoll::core
