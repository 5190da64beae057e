#include "transport/shm/node_arena.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "hiercoll/errors.hpp"

namespace hiercoll::transport {

namespace {
// One flag per two cache lines: ranks spinning on different flags never share a line, and a flag carries up to
// 96 bytes of payload (PeerMemory::flag_payload) in lines the CPU's adjacent-line prefetch moves together, so a
// small allreduce's data rides in the flag's lines rather than in an area (figures: `git log -S kLine --
// lib/transport/shm/node_arena.cpp`).
constexpr size_t kLine = 128;

size_t flag_lines(int local_size, int slots) {
  return static_cast<size_t>(local_size) * kFlagKinds * static_cast<size_t>(slots);
}

size_t ring_lines_end(int local_size, int slots) {  // the byte after the last ring's ring_read flag
  return (flag_lines(local_size, slots) + static_cast<size_t>(local_size) * (NodeArena::kRingLines + 1)) * kLine;
}
}  // namespace

size_t NodeArena::header_bytes(int local_size, int slots) {
  return ring_lines_end(local_size, slots) + static_cast<size_t>(local_size) * kRingLines * kRingEntryBytes;
}

size_t NodeArena::segment_bytes(int local_size, int slots, size_t area_bytes) {
  return header_bytes(local_size, slots) + static_cast<size_t>(slots * local_size) * area_bytes;
}

NodeArena::NodeArena(ShmSegment segment, int local_rank, int local_size, int slots, size_t area_bytes)
    : segment_(std::move(segment)),
      local_rank_(local_rank),
      local_size_(local_size),
      slots_(slots),
      area_bytes_(area_bytes) {}

std::unique_ptr<NodeArena> NodeArena::create(const std::string& tag, int local_size, int slots, size_t area_bytes) {
  auto segment = ShmSegment::create(tag, segment_bytes(local_size, slots, area_bytes));
  return std::unique_ptr<NodeArena>(new NodeArena(std::move(segment), 0, local_size, slots, area_bytes));
}

std::unique_ptr<NodeArena> NodeArena::attach(const std::string& name, int local_rank, int local_size, int slots,
                                             size_t area_bytes) {
  std::optional<ShmSegment> segment = ShmSegment::attach_if_present(name, segment_bytes(local_size, slots, area_bytes));
  // Its maker removes the name only once every local rank has attached: gone before that, the maker died (and a
  // start-up's sweep_stale_segments removed what it left).
  if (!segment) throw RemoteError("the node's shared memory " + name + " is gone: the process that made it died");
  return std::unique_ptr<NodeArena>(new NodeArena(std::move(*segment), local_rank, local_size, slots, area_bytes));
}

uint64_t* NodeArena::line(size_t index) const {
  return reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(segment_.data()) + index * kLine);
}

uint64_t* NodeArena::flag(FlagKind kind, int slot, int owner) const {
  return line((static_cast<size_t>(owner) * kFlagKinds + kind) * static_cast<size_t>(slots_) +
              static_cast<size_t>(slot % slots_));
}

size_t NodeArena::ring_start(int owner) const {
  return flag_lines(local_size_, slots_) + static_cast<size_t>(owner) * (kRingLines + 1);
}

uint64_t* NodeArena::ring_line(int owner, int index) const {
  return line(ring_start(owner) + static_cast<size_t>(index % kRingLines));
}

uint64_t* NodeArena::ring_read(int reader) const { return line(ring_start(reader) + kRingLines); }

uint8_t* NodeArena::ring_data(int owner, int index) const {
  return static_cast<uint8_t*>(segment_.data()) + ring_lines_end(local_size_, slots_) +
         (static_cast<size_t>(owner) * kRingLines + static_cast<size_t>(index % kRingLines)) * kRingEntryBytes;
}

size_t NodeArena::flag_payload_bytes() const { return kLine - kFlagPayloadOffset; }

uint8_t* NodeArena::area(int slot, int owner) const {
  return static_cast<uint8_t*>(segment_.data()) + header_bytes(local_size_, slots_) +
         (static_cast<size_t>(slot % slots_) * local_size_ + owner) * area_bytes_;
}

uint64_t NodeArena::direct_token() const { return static_cast<uint64_t>(getpid()); }

namespace {

// process_vm_readv or process_vm_writev of `bytes` between `here` (this process) and `there` (process `pid`).
template <class Move>
bool cross_memory(Move move, pid_t pid, uint8_t* here, uint8_t* there, size_t bytes) {
  while (bytes > 0) {
    // One call moves at most what the kernel takes at once (MAX_RW_COUNT, about 2 GB); a short one goes on.
    iovec local{here, bytes}, remote{there, bytes};
    const ssize_t moved = move(pid, &local, 1, &remote, 1, 0);
    if (moved <= 0) {
      if (moved < 0 && errno == EINTR) continue;
      return false;  // EPERM / ENOSYS (a sandbox), ESRCH, EFAULT: the caller stages instead
    }
    here += moved;
    there += moved;
    bytes -= static_cast<size_t>(moved);
  }
  return true;
}

}  // namespace

bool NodeArena::direct_read(uint64_t token, void* to, const void* from, size_t bytes) const {
  return cross_memory(process_vm_readv, static_cast<pid_t>(token), static_cast<uint8_t*>(to),
                      const_cast<uint8_t*>(static_cast<const uint8_t*>(from)), bytes);
}

bool NodeArena::direct_write(uint64_t token, void* to, const void* from, size_t bytes) const {
  return cross_memory(process_vm_writev, static_cast<pid_t>(token),
                      const_cast<uint8_t*>(static_cast<const uint8_t*>(from)), static_cast<uint8_t*>(to), bytes);
}

}  // namespace hiercoll::transport
