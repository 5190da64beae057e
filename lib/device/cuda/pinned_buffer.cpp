#include "device/cuda/pinned_buffer.hpp"

#include <algorithm>
#include <utility>

#include "device/cuda/cuda_check.hpp"

namespace hiercoll::device::cuda {

PinnedBuffer::PinnedBuffer(size_t bytes) { reserve(bytes); }

PinnedBuffer::~PinnedBuffer() { release(); }

void PinnedBuffer::release() {
  if (data_ != nullptr) cudaFreeHost(data_);
  for (void* old : retired_) cudaFreeHost(old);
  retired_.clear();
  data_ = device_data_ = nullptr;
  bytes_ = 0;
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : retired_(std::move(other.retired_)),
      data_(std::exchange(other.data_, nullptr)),
      device_data_(std::exchange(other.device_data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    retired_ = std::move(other.retired_);
    data_ = std::exchange(other.data_, nullptr);
    device_data_ = std::exchange(other.device_data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_ && data_ != nullptr) return;
  if (data_ != nullptr) retired_.push_back(data_);
  data_ = device_data_ = nullptr;
  bytes = std::max(bytes, 2 * bytes_);  // geometric growth: few retired allocations
  bytes_ = 0;
  // Portable: pinned for every device's context; mapped: device kernels (the flag waits) can read it.
  check(cudaHostAlloc(&data_, bytes == 0 ? 64 : bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc",
        std::to_string(bytes) + " bytes");
  check(cudaHostGetDevicePointer(&device_data_, data_, 0), "cudaHostGetDevicePointer");
  bytes_ = bytes == 0 ? 64 : bytes;
}

}  // namespace hiercoll::device::cuda
