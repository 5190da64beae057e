#include "backend.hpp"
#include "hiercoll/hiercoll.hpp"

namespace hiercoll::bench {
namespace {

class HiercollBackend final : public Backend {
 public:
  HiercollBackend() : comm_(Communicator::from_env()) {
    // Start-up ends before anything is timed. On one host the fabric opens on a thread of its own after create
    // (docs/design.md, "Start-up"), a tenth of a second of CPU on the core the rank runs on: timed calls made
    // meanwhile lost a scheduler slice to it now and then (docs/experiments.md, "Benchmarks start timing after the
    // fabric has opened"). A reduce is an operation that waits for the fabric; an MPI opens its transports inside
    // MPI_Init.
    float one = 1, sum = 0;
    comm_.reduce(&one, &sum, 1, DataType::kFloat32, ReduceOp::kSum, 0).wait();
  }
  std::string name() const override { return "hiercoll"; }
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  // Operations are queued and run in order; only the last needs waiting for.
  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    last_ = comm_.allreduce(in, out, count, type, op);
  }
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    last_ = comm_.reduce_scatter(in, out, count, type, op);
  }
  void allgather(const void* in, void* out, size_t count, DataType type) override {
    last_ = comm_.allgather(in, out, count, type);
  }
  void broadcast(void* buffer, size_t count, DataType type, int root) override {
    last_ = comm_.broadcast(buffer, buffer, count, type, root);
  }
  void sync() override { last_.wait(); }
  std::string algorithm(size_t bytes) const override { return comm_.allreduce_algorithm(bytes); }

 private:
  Communicator comm_;
  Work last_;
};

}  // namespace

std::unique_ptr<Backend> make_hiercoll_backend() { return std::make_unique<HiercollBackend>(); }

}  // namespace hiercoll::bench
