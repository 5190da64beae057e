// NCCL on GPU buffers (one GPU per rank: device = local rank modulo the device count), rendezvous
// through hiercoll's store. Built when the CUDA toolkit and NCCL are found; runs only where a GPU is.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "device_backend.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/store.hpp"

namespace hiercoll::bench {
namespace {

void check_nccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) throw CudaError(std::string(call) + ": " + ncclGetErrorString(rc));
}

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt8: return ncclInt8;
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

class NcclBackend final : public DeviceBackend {
 public:
  NcclBackend() {
    rank_ = rank_from_env();
    size_ = size_from_env();
    use_device(rank_);
    const char* url = std::getenv("HIERCOLL_STORE");
    if (!url) throw InvalidUsageError("nccl backend: set HIERCOLL_STORE (hiercoll_launch does)");
    store_ = open_store(url, rank_);  // kept: rank 0 may serve it while peers still read
    auto& store = store_;
    ncclUniqueId id;
    if (rank_ == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store->set("nccl/id",
                 Store::Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
    } else {
      auto bytes = store->get("nccl/id");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclBackend() override { ncclCommDestroy(comm_); }
  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    check_nccl(ncclAllReduce(in, out, count, nccl_type(type), nccl_op(op), comm_, stream_), "ncclAllReduce");
  }
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    check_nccl(ncclReduceScatter(in, out, count, nccl_type(type), nccl_op(op), comm_, stream_), "ncclReduceScatter");
  }
  void allgather(const void* in, void* out, size_t count, DataType type) override {
    check_nccl(ncclAllGather(in, out, count, nccl_type(type), comm_, stream_), "ncclAllGather");
  }
  void broadcast(void* buffer, size_t count, DataType type, int root) override {
    check_nccl(ncclBroadcast(buffer, buffer, count, nccl_type(type), root, comm_, stream_), "ncclBroadcast");
  }
  void sync() override { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  int rank_ = 0, size_ = 1;
  std::shared_ptr<Store> store_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend() { return std::make_unique<NcclBackend>(); }

}  // namespace hiercoll::bench
