#pragma once
// Page-locked host memory, mapped into the device's address space: copies to and from it run at full
// PCIe speed without a bounce buffer, and device kernels may read and write it directly.
#include <cstddef>

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
  /// Grows to at least `bytes` (contents are not kept).
  void reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  void* device_data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hiercoll::device::cuda
