#include "transport/cuda/ipc_peer_memory.hpp"

#include <cstring>
#include <string>

#include "device/cuda/cuda_check.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::transport::cuda {

namespace {
constexpr size_t kFlagStride = 128;  // flags a peer spins on never share a 128-byte line
using device::cuda::check;
}  // namespace

IpcPeerMemory::IpcPeerMemory(int device, int local_rank, int local_size, int slots, size_t area_bytes)
    : device_(device),
      local_rank_(local_rank),
      local_size_(local_size),
      slots_(slots),
      area_bytes_((area_bytes + 255) / 256 * 256),  // areas stay 256-byte aligned
      bases_(static_cast<size_t>(local_size), nullptr) {
  device::cuda::DeviceGuard guard(device_);
  const size_t bytes = header_bytes() + static_cast<size_t>(slots_) * area_bytes_;
  void* base = nullptr;
  check(cudaMalloc(&base, bytes), "cudaMalloc", "peer memory of " + std::to_string(bytes) + " bytes");
  // Every flag starts at generation 0; peers map this only after handle() was published, which follows.
  // A stream of its own, never the whole device: a caller's stream may be waiting for this very operation.
  cudaStream_t stream = nullptr;
  cudaError_t zeroed = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (zeroed == cudaSuccess) {
    zeroed = cudaMemsetAsync(base, 0, header_bytes(), stream);
    if (zeroed == cudaSuccess) zeroed = cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  if (zeroed != cudaSuccess) cudaFree(base);  // a constructor that throws runs no destructor
  check(zeroed, "cudaStreamCreateWithFlags / cudaMemsetAsync", "zeroing the peer memory flags");
  bases_[local_rank_] = static_cast<uint8_t*>(base);
}

IpcPeerMemory::~IpcPeerMemory() {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  for (int k = 0; k < local_size_; ++k) {
    if (bases_[k] == nullptr) continue;
    if (k == local_rank_) cudaFree(bases_[k]);
    else cudaIpcCloseMemHandle(bases_[k]);
  }
  cudaSetDevice(previous);
}

size_t IpcPeerMemory::header_bytes() const {
  return (static_cast<size_t>(kFlagKinds) * slots_ * kFlagStride + 255) / 256 * 256;
}

std::vector<uint8_t> IpcPeerMemory::handle() const {
  cudaIpcMemHandle_t handle;
  check(cudaIpcGetMemHandle(&handle, bases_[local_rank_]), "cudaIpcGetMemHandle");
  std::vector<uint8_t> bytes(sizeof(handle));
  std::memcpy(bytes.data(), &handle, sizeof(handle));
  return bytes;
}

void IpcPeerMemory::connect(const std::vector<std::vector<uint8_t>>& handles) {
  if (static_cast<int>(handles.size()) != local_size_) {
    throw InternalError("IpcPeerMemory::connect: " + std::to_string(handles.size()) + " handles for " +
                        std::to_string(local_size_) + " local ranks");
  }
  device::cuda::DeviceGuard guard(device_);
  for (int k = 0; k < local_size_; ++k) {
    if (k == local_rank_) continue;
    if (handles[k].size() != sizeof(cudaIpcMemHandle_t)) {
      throw InvalidUsageError("CUDA IPC handle of local rank " + std::to_string(k) + " has " +
                              std::to_string(handles[k].size()) + " bytes, not " +
                              std::to_string(sizeof(cudaIpcMemHandle_t)));
    }
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, handles[k].data(), sizeof(handle));
    void* base = nullptr;
    check(
        cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle",
        "peer memory of local rank " + std::to_string(k) + " (are all local ranks on GPUs that can reach each other?)");
    bases_[k] = static_cast<uint8_t*>(base);
  }
}

uint8_t* IpcPeerMemory::area(int slot, int owner) const {
  return bases_[owner] + header_bytes() + static_cast<size_t>(slot % slots_) * area_bytes_;
}

uint64_t* IpcPeerMemory::flag(FlagKind kind, int slot, int owner) const {
  return reinterpret_cast<uint64_t*>(
      bases_[owner] + (static_cast<size_t>(kind) * slots_ + static_cast<size_t>(slot % slots_)) * kFlagStride);
}

}  // namespace hiercoll::transport::cuda
