#include "backend.hpp"

#include <cstdlib>
#include <cstring>

#include "hiercoll/errors.hpp"

namespace hiercoll::bench {

void* Backend::allocate(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }
void Backend::release(void* buffer) { std::free(buffer); }
void Backend::upload(void* buffer, const void* host, size_t bytes) { std::memcpy(buffer, host, bytes); }
void Backend::download(void* host, const void* buffer, size_t bytes) { std::memcpy(host, buffer, bytes); }

void Backend::unsupported(const char* what) const {
  throw InvalidUsageError(std::string(what) + " is not supported by the " + name() + " backend of this benchmark");
}
void Backend::reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) { unsupported("reduce_scatter"); }
void Backend::allgather(const void*, void*, size_t, DataType) { unsupported("allgather"); }
void Backend::broadcast(void*, size_t, DataType, int) { unsupported("broadcast"); }

namespace {
int first_env_int(const char* preferred, const char* fallback) {
  const char* value = std::getenv(preferred);
  if (!value) value = std::getenv(fallback);
  if (!value)
    throw InvalidUsageError(std::string("set ") + preferred + " (hiercoll_launch does) or launch with mpirun");
  return std::atoi(value);
}
}  // namespace

int rank_from_env() { return first_env_int("HIERCOLL_RANK", "OMPI_COMM_WORLD_RANK"); }
int size_from_env() { return first_env_int("HIERCOLL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"); }

std::unique_ptr<Backend> make_backend(const std::string& name, int* argc, char*** argv) {
  if (name == "hiercoll") return make_hiercoll_backend();
#ifdef HIERCOLL_BENCH_HIERCOLL_CUDA
  if (name == "hiercoll-cuda") return make_hiercoll_cuda_backend();
#endif
#ifdef HIERCOLL_BENCH_MPI
  if (name == "mpi") return make_mpi_backend(argc, argv);
#endif
#ifdef HIERCOLL_BENCH_GLOO
  if (name == "gloo") return make_gloo_backend();
#endif
#ifdef HIERCOLL_BENCH_NCCL
  if (name == "nccl") return make_nccl_backend();
#endif
  throw InvalidUsageError("--backend " + name +
                          ": not built in (available: hiercoll"
#ifdef HIERCOLL_BENCH_HIERCOLL_CUDA
                          ", hiercoll-cuda"
#endif
#ifdef HIERCOLL_BENCH_MPI
                          ", mpi"
#endif
#ifdef HIERCOLL_BENCH_GLOO
                          ", gloo"
#endif
#ifdef HIERCOLL_BENCH_NCCL
                          ", nccl"
#endif
                          ")");
}

}  // namespace hiercoll::bench
