#include "transport/shm/shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "base/unique_fd.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::transport {
namespace {

constexpr const char* kPrefix = "hiercoll-";

[[noreturn]] void throw_errno(const std::string& call, const std::string& name) {
  throw SystemError(call + "(" + name + ") failed: " + std::strerror(errno));
}

void* map(int fd, size_t bytes, const std::string& name) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) throw_errno("mmap", name);
  return data;
}

}  // namespace

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)), data_(other.data_), size_(other.size_), owner_(other.owner_) {
  other.data_ = nullptr;
  other.owner_ = false;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    owner_ = other.owner_;
    other.data_ = nullptr;
    other.owner_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() noexcept {
  if (owner_) unlink();
  if (data_) munmap(data_, size_);
  data_ = nullptr;
}

ShmSegment ShmSegment::create(const std::string& tag, size_t bytes) {
  ShmSegment segment;
  segment.name_ = "/" + std::string(kPrefix) + std::to_string(getpid()) + "-" + tag;
  base::UniqueFd fd(shm_open(segment.name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) throw_errno("shm_open", segment.name_);
  segment.owner_ = true;  // from here on the destructor unlinks, whatever fails next
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    throw_errno("ftruncate", segment.name_ + ", " + std::to_string(bytes) + " bytes; is /dev/shm large enough?");
  }
  segment.data_ = map(fd.get(), bytes, segment.name_);
  segment.size_ = bytes;
  return segment;
}

ShmSegment ShmSegment::attach(const std::string& name, size_t bytes) {
  std::optional<ShmSegment> segment = attach_if_present(name, bytes);
  if (!segment) throw SystemError("shm_open(" + name + ") failed: no such segment");
  return std::move(*segment);
}

std::optional<ShmSegment> ShmSegment::attach_if_present(const std::string& name, size_t bytes) {
  ShmSegment segment;
  segment.name_ = name;
  base::UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid() && errno == ENOENT) return std::nullopt;
  if (!fd.valid()) throw_errno("shm_open", name);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    throw SystemError("shared memory segment " + name + " is smaller than the " + std::to_string(bytes) +
                      " bytes expected");
  }
  segment.data_ = map(fd.get(), bytes, name);
  segment.size_ = bytes;
  return segment;
}

void ShmSegment::unlink() {
  if (!owner_) return;
  shm_unlink(name_.c_str());
  owner_ = false;
}

int sweep_stale_segments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const size_t prefix_length = std::strlen(kPrefix);
  while (dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, kPrefix, prefix_length) != 0) continue;
    pid_t pid = static_cast<pid_t>(std::atol(entry->d_name + prefix_length));
    if (pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) continue;  // creator alive (or not ours to judge)
    if (shm_unlink(("/" + std::string(entry->d_name)).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace hiercoll::transport
