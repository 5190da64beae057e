// hiercoll on CUDA device buffers (one device per rank: local rank modulo the device count, so several ranks
// may share a GPU), on a stream of its own, as nccl-tests drives NCCL. Built with HIERCOLL_WITH_CUDA.
#include "device_backend.hpp"
#include "hiercoll/hiercoll.hpp"

namespace hiercoll::bench {
namespace {

class HiercollCudaBackend final : public DeviceBackend {
 public:
  HiercollCudaBackend() : comm_(Communicator::from_env()) { use_device(comm_.layout().local_rank); }
  std::string name() const override { return "hiercoll-cuda"; }
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    last_ = comm_.allreduce(in, out, count, type, op, {stream_});
  }
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    last_ = comm_.reduce_scatter(in, out, count, type, op, {stream_});
  }
  void allgather(const void* in, void* out, size_t count, DataType type) override {
    last_ = comm_.allgather(in, out, count, type, {stream_});
  }
  void broadcast(void* buffer, size_t count, DataType type, int root) override {
    last_ = comm_.broadcast(buffer, buffer, count, type, root, {stream_});
  }
  // Operations run in issue order: ordering the stream after the last one and draining it covers them all.
  void sync() override {
    last_.wait();
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  std::string algorithm(size_t bytes) const override { return comm_.allreduce_algorithm(bytes, true); }

 private:
  Communicator comm_;
  Work last_;
};

}  // namespace

std::unique_ptr<Backend> make_hiercoll_cuda_backend() { return std::make_unique<HiercollCudaBackend>(); }

}  // namespace hiercoll::bench
