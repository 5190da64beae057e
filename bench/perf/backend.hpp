#pragma once
// One interface over the libraries the benchmark compares, so each runs through the same harness on the
// same ranks and sizes: hiercoll, Open MPI (MPI_Allreduce...), Gloo, NCCL (GPU buffers).
// Calls may be asynchronous (hiercoll, NCCL); sync() waits for everything issued.
#include <cstddef>
#include <memory>
#include <string>

#include "hiercoll/types.hpp"

namespace hiercoll::bench {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Buffers the collectives run on (device memory for NCCL), and copies to and from host memory.
  virtual void* allocate(size_t bytes);
  virtual void release(void* buffer);
  virtual void upload(void* buffer, const void* host, size_t bytes);
  virtual void download(void* host, const void* buffer, size_t bytes);

  virtual void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) = 0;
  virtual void reduce_scatter(const void* in, void* out, size_t recv_count, DataType type, ReduceOp op);
  virtual void allgather(const void* in, void* out, size_t send_count, DataType type);
  virtual void broadcast(void* buffer, size_t count, DataType type, int root);
  virtual void sync() {}
  /// Algorithm the backend will use, if it says ("ring", "hier", ...).
  virtual std::string algorithm(size_t bytes) const { return "-"; }

 protected:
  [[noreturn]] void unsupported(const char* what) const;
};

/// Rank and size for backends without their own launcher support: HIERCOLL_RANK / HIERCOLL_WORLD_SIZE
/// (hiercoll_launch), else Open MPI's variables.
int rank_from_env();
int size_from_env();

/// "hiercoll", "hiercoll-cuda" (device buffers), "mpi", "gloo" or "nccl" (those compiled in; see bench/CMakeLists.txt).
std::unique_ptr<Backend> make_backend(const std::string& name, int* argc, char*** argv);

std::unique_ptr<Backend> make_hiercoll_backend();
std::unique_ptr<Backend> make_hiercoll_cuda_backend();
std::unique_ptr<Backend> make_mpi_backend(int* argc, char*** argv);
std::unique_ptr<Backend> make_gloo_backend();
std::unique_ptr<Backend> make_nccl_backend();

}  // namespace hiercoll::bench
