#pragma once
// Page-locked host memory, mapped into the device's address space: copies to and from it run at full
// PCIe speed without a bounce buffer, and device kernels may read and write it directly.
#include <cstddef>
#include <vector>

namespace hiercoll::device::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  /// The same memory as a device pointer (equal to data() under unified addressing).
  void* device_data() const { return device_data_; }
  size_t bytes() const { return bytes_; }
  /// Forgets the allocation without freeing it: for words that kernels queued on callers' streams may still
  /// read after their owner is gone (a few bytes per communicator).
  void leak() {
    data_ = device_data_ = nullptr;
    bytes_ = 0;
  }
  /// Grows to at least `bytes` (contents are not kept). The old allocation is kept until destruction:
  /// freeing pinned memory may synchronise the device, and a caller's stream may be waiting for us.
  void reserve(size_t bytes);

 private:
  void release();
  std::vector<void*> retired_;
  void* data_ = nullptr;
  void* device_data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hiercoll::device::cuda
