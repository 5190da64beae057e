#include "transport/shm/node_arena.hpp"

#include <thread>

#include "hiercoll/errors.hpp"

namespace hiercoll::transport {

namespace {
constexpr size_t kLine = 64;
static_assert(std::atomic<uint64_t>::is_always_lock_free, "flags in shared memory must be lock-free");
}  // namespace

size_t NodeArena::header_bytes(int local_size) { return static_cast<size_t>(local_size) * kLine; }

NodeArena::NodeArena(ShmSegment segment, int local_rank, int local_size, int buffers, size_t area_bytes)
    : segment_(std::move(segment)),
      local_rank_(local_rank),
      local_size_(local_size),
      buffers_(buffers),
      area_bytes_(area_bytes) {}

std::unique_ptr<NodeArena> NodeArena::create(const std::string& tag, int local_size, int buffers, size_t area_bytes) {
  size_t bytes = header_bytes(local_size) + static_cast<size_t>(buffers * local_size) * area_bytes;
  auto segment = ShmSegment::create(tag, bytes);  // zero-filled: every flag starts at epoch 0
  return std::unique_ptr<NodeArena>(new NodeArena(std::move(segment), 0, local_size, buffers, area_bytes));
}

std::unique_ptr<NodeArena> NodeArena::attach(const std::string& name, int local_rank, int local_size, int buffers,
                                             size_t area_bytes) {
  size_t bytes = header_bytes(local_size) + static_cast<size_t>(buffers * local_size) * area_bytes;
  return std::unique_ptr<NodeArena>(
      new NodeArena(ShmSegment::attach(name, bytes), local_rank, local_size, buffers, area_bytes));
}

std::atomic<uint64_t>& NodeArena::flag(int owner) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<uint8_t*>(segment_.data()) + owner * kLine);
}

// Two signature slots per rank, by epoch parity: a rank can run at most one barrier ahead of us (it cannot
// pass the next one without us), so it never overwrites the slot of the barrier we are checking.
std::atomic<uint64_t>& NodeArena::signature(int owner, uint64_t epoch) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<uint8_t*>(segment_.data()) + owner * kLine + 8 +
                                                   8 * (epoch % 2));
}

uint8_t* NodeArena::area(int buffer, int owner) const {
  return static_cast<uint8_t*>(segment_.data()) + header_bytes(local_size_) +
         (static_cast<size_t>(buffer % buffers_) * local_size_ + owner) * area_bytes_;
}

void NodeArena::barrier(std::chrono::steady_clock::time_point deadline, const std::string& what,
                        const std::atomic<bool>& aborted, uint64_t expected_signature) {
  ++epoch_;
  signature(local_rank_, epoch_).store(expected_signature, std::memory_order_relaxed);
  flag(local_rank_).store(epoch_, std::memory_order_release);
  auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  for (int other = 0; other < local_size_; ++other) {
    while (flag(other).load(std::memory_order_acquire) < epoch_) {
      auto now = std::chrono::steady_clock::now();
      if (aborted.load(std::memory_order_relaxed)) throw RemoteError(what + ": the communicator was aborted");
      if (now >= deadline) {
        throw TimeoutError(what + ": local rank " + std::to_string(other) +
                           " never reached the shared-memory barrier (did it die, or call another operation?)");
      }
      if (now < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  if (expected_signature == 0) return;
  for (int other = 0; other < local_size_; ++other) {
    if (signature(other, epoch_).load(std::memory_order_relaxed) != expected_signature) {
      throw InvalidUsageError(what + ": local rank " + std::to_string(other) +
                              " called this operation with a different count, type or op");
    }
  }
}

}  // namespace hiercoll::transport
