// Open MPI's own collectives (its tuned component picks the algorithm), for comparison.
#define OMPI_SKIP_MPICXX 1  // the C API only: the deprecated C++ bindings need libmpi_cxx
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <cstring>

#include "backend.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::bench {
namespace {

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    default: throw InvalidUsageError(std::string("MPI has no ") + to_string(type));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    default: throw InvalidUsageError("MPI has no avg");
  }
}

class MpiBackend final : public Backend {
 public:
  MpiBackend(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiBackend() override { MPI_Finalize(); }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, static_cast<int>(count), mpi_type(type), mpi_op(op),
                  MPI_COMM_WORLD);
  }
  // In place, our output is the rank's block of the input (as NCCL's); MPI forbids aliased buffers (Intel MPI and
  // MPICH check) and wants MPI_IN_PLACE instead, which for reduce-scatter leaves the result at the buffer's start.
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    const size_t block = count * dtype_size(type);
    auto* base = static_cast<uint8_t*>(const_cast<void*>(in));
    if (out == base + static_cast<size_t>(rank_) * block) {
      MPI_Reduce_scatter_block(MPI_IN_PLACE, base, static_cast<int>(count), mpi_type(type), mpi_op(op),
                               MPI_COMM_WORLD);
      if (rank_ != 0) std::memmove(out, base, block);
      return;
    }
    MPI_Reduce_scatter_block(in, out, static_cast<int>(count), mpi_type(type), mpi_op(op), MPI_COMM_WORLD);
  }
  void allgather(const void* in, void* out, size_t count, DataType type) override {
    const bool in_place = in == static_cast<uint8_t*>(out) + static_cast<size_t>(rank_) * count * dtype_size(type);
    MPI_Allgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(count), mpi_type(type), out, static_cast<int>(count),
                  mpi_type(type), MPI_COMM_WORLD);
  }
  void broadcast(void* buffer, size_t count, DataType type, int root) override {
    MPI_Bcast(buffer, static_cast<int>(count), mpi_type(type), root, MPI_COMM_WORLD);
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(int* argc, char*** argv) { return std::make_unique<MpiBackend>(argc, argv); }

}  // namespace hiercoll::bench
