#pragma once
// NodeArena: one shared-memory segment per node through which its local ranks exchange host data.
//
// Layout: a header of flags (128 bytes each, by owner, kind and slot), then per owner its ring of kRingLines
// flags and its ring_read flag, then per owner its ring's data blocks (kRingLines x kRingEntryBytes), then slots x
// local_size data areas of `area_bytes` each. The segment is zero-filled when made, so every flag starts at
// generation 0.
#include <cstdint>
#include <memory>
#include <string>

#include "transport/peer_memory.hpp"
#include "transport/shm/shm_segment.hpp"

namespace hiercoll::transport {

class NodeArena final : public PeerMemory {
 public:
  /// Local rank 0 creates the segment; the others attach once `name` is known (exchanged by the caller).
  static std::unique_ptr<NodeArena> create(const std::string& tag, int local_size, int slots, size_t area_bytes);
  static std::unique_ptr<NodeArena> attach(const std::string& name, int local_rank, int local_size, int slots,
                                           size_t area_bytes);
  const std::string& name() const { return segment_.name(); }
  /// Removes the segment's name once every local rank has attached (see ShmSegment).
  void unlink() { segment_.unlink(); }

  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int slots() const override { return slots_; }
  size_t area_bytes() const override { return area_bytes_; }
  uint8_t* area(int slot, int owner) const override;
  uint64_t* flag(FlagKind kind, int slot, int owner) const override;
  size_t flag_payload_bytes() const override;
  int ring_lines() const override { return kRingLines; }
  uint64_t* ring_line(int owner, int index) const override;
  uint64_t* ring_read(int reader) const override;
  size_t ring_entry_bytes() const override { return kRingEntryBytes; }
  uint8_t* ring_data(int owner, int index) const override;
  uint64_t direct_token() const override;
  bool direct_read(uint64_t token, void* to, const void* from, size_t bytes) const override;
  bool direct_write(uint64_t token, void* to, const void* from, size_t bytes) const override;

  /// Entries of a rank's ring: how many small broadcasts a root may run ahead of the slowest local rank.
  static constexpr int kRingLines = 32;
  /// The largest broadcast a ring entry carries (its data block). Up to this size a broadcast's root runs ahead of
  /// its readers instead of in lock step with them through the slots' rounds (2 ranks, 4 KB: see broadcast_node).
  static constexpr size_t kRingEntryBytes = 4096;

 private:
  NodeArena(ShmSegment segment, int local_rank, int local_size, int slots, size_t area_bytes);
  static size_t header_bytes(int local_size, int slots);  // the flags, the rings, the rings' data
  uint64_t* line(size_t index) const;
  size_t ring_start(int owner) const;  // the line index of `owner`'s ring; its ring_read flag follows it
  static size_t segment_bytes(int local_size, int slots, size_t area_bytes);

  ShmSegment segment_;
  int local_rank_, local_size_, slots_;
  size_t area_bytes_;
};

}  // namespace hiercoll::transport
