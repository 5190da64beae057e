// What a job pays before its first result: making the backend (hiercoll's Communicator::create, MPI_Init, Gloo's
// context and full mesh) and its first allreduce of one float, on rank 0, any backend through the same harness.
//   hiercoll_launch -n N -- startup_perf --backend hiercoll
//   mpirun -np N startup_perf --backend mpi
// Rank 0 prints one line: STARTUP backend <name> ranks <N> init_ms <ms> first_allreduce_ms <ms>, both from just
// before the backend is made (the second includes the first). Each rank's own process start is not counted; rank 0's
// init includes waiting for the other ranks to arrive, as every backend's does. Checks the allreduce's result.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "backend.hpp"
#include "hiercoll/errors.hpp"

int main(int argc, char** argv) {
  std::string backend_name = "hiercoll";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0) backend_name = argv[i + 1];
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    auto since_start = [&] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
    auto backend = hiercoll::bench::make_backend(backend_name, &argc, &argv);
    const double init_ms = since_start();
    float one = 1.0f, sum = 0.0f;
    backend->allreduce(&one, &sum, 1, hiercoll::DataType::kFloat32, hiercoll::ReduceOp::kSum);
    backend->sync();
    const double first_ms = since_start();
    if (sum != static_cast<float>(backend->size())) {
      std::fprintf(stderr, "startup_perf: rank %d: allreduce gave %g, want %d\n", backend->rank(), sum,
                   backend->size());
      return 1;
    }
    if (backend->rank() == 0) {
      std::printf("STARTUP backend %s ranks %d init_ms %.1f first_allreduce_ms %.1f\n", backend->name().c_str(),
                  backend->size(), init_ms, first_ms);
    }
  } catch (const hiercoll::Error& e) {
    std::fprintf(stderr, "startup_perf: %s\n", e.what());
    return 1;
  }
  return 0;
}
