#pragma once
// What the backends on CUDA device buffers share: the buffers (cudaMalloc), copies to and from the host,
// and the stream their collectives are enqueued on.
#include <cuda_runtime_api.h>

#include <string>

#include "backend.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::bench {

inline void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) throw CudaError(std::string(call) + ": " + cudaGetErrorString(rc));
}

class DeviceBackend : public Backend {
 public:
  ~DeviceBackend() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes + 64), "cudaMalloc");
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  // On the collectives' stream, drained before returning. A plain cudaMemcpy from pageable memory may return
  // before its DMA has landed, and runs on the legacy stream, which the collectives' non-blocking stream does not
  // wait for: the in-place checks (upload, then the collective at once) read the old contents on an H100 when
  // ranks ran concurrently under MPS (hundreds of thousands of "wrong" elements, for hiercoll before and after).
  void upload(void* d, const void* h, size_t n) override {
    check_cuda(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void download(void* h, const void* d, size_t n) override {
    check_cuda(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 protected:
  /// Picks the device (`rank` modulo the device count, so ranks may share a GPU) and makes the stream.
  void use_device(int rank) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    check_cuda(cudaSetDevice(rank % devices), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  cudaStream_t stream_ = nullptr;
};

}  // namespace hiercoll::bench
