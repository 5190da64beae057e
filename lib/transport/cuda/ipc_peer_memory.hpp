#pragma once
// IpcPeerMemory: PeerMemory of device buffers. Each local rank allocates its own flags and areas on its
// GPU and exports them as a CUDA IPC handle; the others map it into their address space, so a kernel of
// any local rank reads a peer's area directly (NVLink / PCIe peer-to-peer loads, or plain loads when
// ranks share one GPU). The caller carries the handles between ranks (through the store).
//
// Layout of each rank's allocation: flags (kFlagKinds x slots, 128 bytes apart), then `slots` areas.
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/peer_memory.hpp"

namespace hiercoll::transport::cuda {

class IpcPeerMemory final : public PeerMemory {
 public:
  /// Allocates and zeroes this rank's part on `device` (the caller's current device must be `device`).
  IpcPeerMemory(int device, int local_rank, int local_size, int slots, size_t area_bytes);
  ~IpcPeerMemory() override;
  IpcPeerMemory(const IpcPeerMemory&) = delete;
  IpcPeerMemory& operator=(const IpcPeerMemory&) = delete;

  /// This rank's IPC handle, to publish to the other local ranks.
  std::vector<uint8_t> handle() const;
  /// Maps every other local rank's part; handles[k] is local rank k's handle() (this rank's is skipped).
  void connect(const std::vector<std::vector<uint8_t>>& handles);

  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int slots() const override { return slots_; }
  size_t area_bytes() const override { return area_bytes_; }
  uint8_t* area(int slot, int owner) const override;
  uint64_t* flag(FlagKind kind, int slot, int owner) const override;

 private:
  size_t header_bytes() const;
  int device_, local_rank_, local_size_, slots_;
  size_t area_bytes_;
  std::vector<uint8_t*> bases_;  // by local rank: own allocation, or the mapped peer allocation
};

}  // namespace hiercoll::transport::cuda
