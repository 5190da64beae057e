#pragma once
// NodeArena: one shared-memory segment per node through which its local ranks exchange data.
//
// Layout: a header of per-rank flag and signature words (one cache line per rank), then `buffers` x local_size data
// areas of `area_bytes` each. Synchronisation is a flag barrier: each rank publishes an increasing epoch and waits
// until every local rank has published at least as much, spinning briefly then sleeping, and giving up
// with TimeoutError (naming the local rank it waited for) at the deadline.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/shm/shm_segment.hpp"

namespace hiercoll::transport {

class NodeArena {
 public:
  /// Local rank 0 creates the segment; the others attach once `name` is known (exchanged by the caller).
  static std::unique_ptr<NodeArena> create(const std::string& tag, int local_size, int buffers, size_t area_bytes);
  static std::unique_ptr<NodeArena> attach(const std::string& name, int local_rank, int local_size, int buffers,
                                           size_t area_bytes);
  const std::string& name() const { return segment_.name(); }
  /// Removes the segment's name once every local rank has attached (see ShmSegment).
  void unlink() { segment_.unlink(); }

  int local_size() const { return local_size_; }
  size_t area_bytes() const { return area_bytes_; }
  /// Data area of local rank `owner` in buffer set `buffer`.
  uint8_t* area(int buffer, int owner) const;

  /// Waits until every local rank reached this barrier. `what` names the operation in errors.
  /// A non-zero `signature` (a digest of the operation's arguments) must be the same on every local rank,
  /// else InvalidUsageError: ranks called different operations or sizes, which would corrupt data silently.
  void barrier(std::chrono::steady_clock::time_point deadline, const std::string& what,
               const std::atomic<bool>& aborted, uint64_t signature = 0);

 private:
  NodeArena(ShmSegment segment, int local_rank, int local_size, int buffers, size_t area_bytes);
  static size_t header_bytes(int local_size);
  std::atomic<uint64_t>& flag(int owner) const;
  std::atomic<uint64_t>& signature(int owner, uint64_t epoch) const;

  ShmSegment segment_;
  int local_rank_, local_size_, buffers_;
  size_t area_bytes_;
  uint64_t epoch_ = 0;
};

}  // namespace hiercoll::transport
