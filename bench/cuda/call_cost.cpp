// What one small collective on device buffers costs the host, call by call: the CUDA runtime calls a device
// collective is made of, then hiercoll's and NCCL's 8-byte allreduce on one rank, in place and out of place, on
// the same GPU, stream and buffers. Two figures per line, in microseconds per call (median of 7 rounds):
//   issue   back-to-back calls, the stream drained once at the end of the round: what a training loop pays
//   synced  each call followed by cudaStreamSynchronize: the round trip through the device
//   hiercoll_cuda_call_cost [calls per round, default 2000]
// One rank needs no launcher: hiercoll rendezvous through a FileStore in /tmp, NCCL through ncclCommInitAll.
#include <cuda.h>  // types of the driver entry point below (no link with libcuda)
#include <cuda_runtime_api.h>
#ifdef HIERCOLL_BENCH_NCCL
#include <nccl.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "hiercoll/hiercoll.hpp"
#include "device/cuda/sync_kernels.cuh"
#include "reduce/cuda/reduce_cuda.hpp"

using namespace hiercoll;
using Clock = std::chrono::steady_clock;

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

cudaStream_t stream = nullptr;
int calls = 2000;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per call: `synced` drains the stream after every call.
double per_call(const std::function<void()>& call, bool synced) {
  std::vector<double> rounds;
  for (int i = 0; i < 50; ++i) call();  // warm-up
  check(cudaStreamSynchronize(stream), "sync");
  for (int round = 0; round < 7; ++round) {
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      call();
      if (synced) check(cudaStreamSynchronize(stream), "sync");
    }
    check(cudaStreamSynchronize(stream), "sync");
    rounds.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }
  return median(rounds);
}

void row(const char* what, const std::function<void()>& call, bool sync_too = true) {
  const double issue = per_call(call, false);
  if (sync_too) std::printf("%-52s %8.2f %8.2f\n", what, issue, per_call(call, true));
  else std::printf("%-52s %8.2f %8s\n", what, issue, "-");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) calls = std::max(10, std::atoi(argv[1]));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("SKIPPED: no CUDA device");
    return 77;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void *in = nullptr, *out = nullptr;
  check(cudaMalloc(&in, 256), "cudaMalloc");
  check(cudaMalloc(&out, 256), "cudaMalloc");
  check(cudaMemset(in, 0, 256), "cudaMemset");
  std::printf("# host microseconds per call, median of 7 rounds of %d calls; 8-byte float32 sum on one rank\n", calls);
  std::printf("%-52s %8s %8s\n", "call", "issue", "synced");

  // The CUDA runtime calls a device collective is made of.
  cudaPointerAttributes attributes{};
  row("cudaPointerGetAttributes", [&] { cudaPointerGetAttributes(&attributes, in); }, false);
  cudaStreamCaptureStatus capture{};
  row("cudaStreamIsCapturing", [&] { cudaStreamIsCapturing(stream, &capture); }, false);
  row("cudaEventCreateWithFlags + cudaEventDestroy", [&] {
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventDestroy(e);
  }, false);
  cudaEvent_t event;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  row("cudaEventRecord", [&] { cudaEventRecord(event, stream); });
  row("cudaEventRecord + cudaStreamWaitEvent", [&] {
    cudaEventRecord(event, stream);
    cudaStreamWaitEvent(stream, event, 0);
  });
  row("cudaMemcpyAsync D2D 8 B", [&] { cudaMemcpyAsync(out, in, 8, cudaMemcpyDefault, stream); });
  row("kernel launch (hiercoll divide, 2 elements)",
      [&] { reduce::cuda::divide(out, 2, DataType::kFloat32, 1, stream); });
  row("hiercoll copy kernel 8 B", [&] { reduce::cuda::copy(out, in, 8, stream); });
  // Two ways to tell the host that the stream got somewhere: hiercoll's signal kernel on a host-mapped word, and
  // the driver's stream memory operation.
  void* flag_host = nullptr;
  void* flag_device = nullptr;
  check(cudaHostAlloc(&flag_host, 64, cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostGetDevicePointer(&flag_device, flag_host, 0), "cudaHostGetDevicePointer");
  device::cuda::load_sync_kernels();
  uint64_t value = 0;
  row("signal kernel on a host-mapped flag",
      [&] { device::cuda::enqueue_signal(static_cast<uint64_t*>(flag_device), ++value, 0, stream); });
  using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &entry, 12000, cudaEnableDefault, &found) ==
          cudaSuccess && found == cudaDriverEntryPointSuccess) {
    auto write_value = reinterpret_cast<WriteValue64>(entry);
    const auto address = reinterpret_cast<CUdeviceptr>(flag_device);
    if (write_value(stream, address, 1, 0) == CUDA_SUCCESS) {
      row("cuStreamWriteValue64 on a host-mapped flag", [&] { write_value(stream, address, ++value, 0); });
    } else {
      std::puts("cuStreamWriteValue64: refused (stream memory operations not supported here)");
    }
  }

  // hiercoll, one rank, through the public API as a user calls it.
  {
    const std::string path = "/tmp/hiercoll-call-cost-" + std::to_string(getpid());
    auto store = std::make_shared<FileStore>(path, std::chrono::minutes(1), /*remove_when_done=*/true);
    Communicator comm = Communicator::create(store, 0, 1);
    CallOptions on{stream};
    row("hiercoll allreduce in place (issue + Work::wait)",
        [&] { comm.allreduce(out, out, 2, DataType::kFloat32, ReduceOp::kSum, on).wait(); });
    row("hiercoll allreduce out of place (issue + Work::wait)",
        [&] { comm.allreduce(in, out, 2, DataType::kFloat32, ReduceOp::kSum, on).wait(); });
    row("hiercoll allreduce in place, avg", [&] { comm.allreduce(out, out, 2, DataType::kFloat32, ReduceOp::kAvg, on).wait(); });
    row("hiercoll broadcast in place", [&] { comm.broadcast(out, out, 2, DataType::kFloat32, 0, on).wait(); });
  }
#ifdef HIERCOLL_BENCH_NCCL
  {
    ncclComm_t comm;
    int device = 0;
    if (ncclCommInitAll(&comm, 1, &device) != ncclSuccess) {
      std::puts("nccl: ncclCommInitAll failed");
      return 1;
    }
    row("nccl allreduce in place", [&] { ncclAllReduce(out, out, 2, ncclFloat32, ncclSum, comm, stream); });
    row("nccl allreduce out of place", [&] { ncclAllReduce(in, out, 2, ncclFloat32, ncclSum, comm, stream); });
    row("nccl allreduce in place, avg", [&] { ncclAllReduce(out, out, 2, ncclFloat32, ncclAvg, comm, stream); });
    row("nccl broadcast in place", [&] { ncclBroadcast(out, out, 2, ncclFloat32, 0, comm, stream); });
    ncclCommDestroy(comm);
  }
#endif
  return 0;
}
