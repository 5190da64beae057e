#pragma once
// POSIX shared-memory segments with a life cycle that leaves nothing in /dev/shm:
//   the creator makes "/hiercoll-<creator pid>-<tag>" (O_EXCL), the others attach, and once everyone
//   has attached the name is unlinked; the mappings live on until each process unmaps (or dies).
// If a process dies between create and unlink, the name is stale: sweep_stale_segments() (run when a
// communicator starts) removes every hiercoll segment whose creator pid no longer exists.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace hiercoll::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  /// Creates and maps a zero-filled segment. `tag` should be unique per job and node.
  static ShmSegment create(const std::string& tag, size_t bytes);
  /// Maps a segment another process created under `name` (from name()).
  static ShmSegment attach(const std::string& name, size_t bytes);
  /// As attach, but no segment of that name is nullopt rather than an error.
  static std::optional<ShmSegment> attach_if_present(const std::string& name, size_t bytes);
  /// Removes the name; the mapping stays valid. Idempotent.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release() noexcept;  // unlinks (if the owner) and unmaps; the members stay alive for reuse

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
};

/// Removes hiercoll segments in /dev/shm whose creating process is gone. Returns how many it removed.
int sweep_stale_segments();

}  // namespace hiercoll::transport
