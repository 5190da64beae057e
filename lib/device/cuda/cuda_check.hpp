#pragma once
// Every CUDA runtime call is checked; the error names the call and what it was for.
#include <cuda_runtime_api.h>

#include <string>

#include "hiercoll/errors.hpp"

namespace hiercoll::device::cuda {

inline void check(cudaError_t err, const char* call, const std::string& context = {}) {
  if (err != cudaSuccess) {
    throw CudaError(std::string(call) + " failed: " + cudaGetErrorString(err) +
                    (context.empty() ? "" : " (" + context + ")"));
  }
}

/// Makes `device` current on this thread for the scope, then restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace hiercoll::device::cuda
