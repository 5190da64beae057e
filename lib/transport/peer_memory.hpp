#pragma once
// PeerMemory: memory that every rank of a node can address, through which they exchange pieces of a
// collective. Per local rank (its owner) it holds `slots` data areas and, per slot, one flag of each kind
// (see device/queue.hpp for what a flag is). Shared memory provides it for host buffers (NodeArena),
// CUDA IPC for device buffers (transport/cuda/ipc_peer_memory). Algorithms see only this interface.
#include <cstddef>
#include <cstdint>

namespace hiercoll::transport {

/// The flag kinds a slot carries: one per synchronisation step of the hierarchical allreduce.
enum FlagKind : int { kFlagStaged = 0, kFlagPublished = 1, kFlagKinds = 2 };

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual int slots() const = 0;
  virtual size_t area_bytes() const = 0;
  /// Data area `slot` of local rank `owner`, addressable by this rank (a host or a device pointer).
  virtual uint8_t* area(int slot, int owner) const = 0;
  /// Flag `kind` of area `slot` of `owner`: two 64-bit words, zero at creation.
  virtual uint64_t* flag(FlagKind kind, int slot, int owner) const = 0;
  /// Bytes of data a flag's own cache line carries beside its words (0: none), at flag_payload(). A round whose
  /// data fits there costs one cache-line transfer per peer instead of two: the wait's read of the flag brings the
  /// data with it. Written before the flag is signalled and read after it is seen, like an area.
  virtual size_t flag_payload_bytes() const { return 0; }
  uint8_t* flag_payload(FlagKind kind, int slot, int owner) const {
    return reinterpret_cast<uint8_t*>(flag(kind, slot, owner)) + kFlagPayloadOffset;
  }

  /// A ring of `ring_lines()` flags per owner (0: none), each with flag_payload_bytes() of payload, for small data
  /// one rank sends to all the others without waiting for them (broadcast_node): entry `index` of `owner`'s ring.
  /// Its readers count the entries they have finished reading, over all owners' rings, in ring_read(reader).
  virtual int ring_lines() const { return 0; }
  virtual uint64_t* ring_line(int /*owner*/, int /*index*/) const { return nullptr; }
  virtual uint64_t* ring_read(int /*reader*/) const { return nullptr; }
  /// Data too large for an entry's flag line goes in the entry's data block (ring_entry_bytes() of them; 0: none),
  /// written before the entry is signalled and read after it is seen, like the line's own payload.
  virtual size_t ring_entry_bytes() const { return 0; }
  virtual uint8_t* ring_data(int /*owner*/, int /*index*/) const { return nullptr; }

  /// Single-copy reads of another local rank's own memory, its caller's buffers (host memory: Linux cross-memory
  /// attach, process_vm_readv), so that data which only moves (allgather, broadcast) is copied once instead of
  /// through an area. direct_token(): what this rank publishes so that peers can read from it; 0 where this memory
  /// has no such reads. direct_read(): `bytes` at address `from` of the rank that published `token`, into `to`;
  /// false if the system refused (a seccomp filter, ptrace restrictions): the caller then stages.
  virtual uint64_t direct_token() const { return 0; }
  virtual bool direct_read(uint64_t /*token*/, void* /*to*/, const void* /*from*/, size_t /*bytes*/) const {
    return false;
  }
  /// The other way: `bytes` from this rank's `from` to address `to` of the rank that published `token`, so that a
  /// broadcast's root can copy part of the data while the others read the rest. False if the system refused.
  virtual bool direct_write(uint64_t /*token*/, void* /*to*/, const void* /*from*/, size_t /*bytes*/) const {
    return false;
  }
  /// Where a flag's payload starts in its line: after the words device/queue.hpp gives a flag (generation,
  /// signature, HostQueue's sleeper count).
  static constexpr size_t kFlagPayloadOffset = 32;
};

}  // namespace hiercoll::transport
