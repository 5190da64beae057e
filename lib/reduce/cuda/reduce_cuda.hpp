#pragma once
// Element-wise reductions on device memory, enqueued on a stream (no host synchronisation).
// Same contract as the host kernels (reduce.hpp): fp16/bf16 reduce in fp32 and round once, integers wrap.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "hiercoll/types.hpp"

namespace hiercoll::reduce::cuda {

/// dst[i] = a[i] op b[i]; dst may be a or b exactly. 16-byte aligned buffers take the vectorised path
/// (one 16-byte load per operand per thread and iteration), others an element-wise one.
/// Throws CudaError if the launch fails.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op, cudaStream_t stream);
/// Sources one kernel launch reduces at once; more take several launches.
inline constexpr int kMaxSources = 16;
/// dst[i] = sources[0][i] op ... op sources[n-1][i], in one pass per kMaxSources sources: accumulated in fp32 for
/// fp16/bf16 and rounded once per pass. dst may be sources[0] exactly. Sources may be CUDA-IPC-mapped peer memory.
void reduce_many(void* dst, const void* const* sources, int source_count, size_t count, DataType type, ReduceOp op,
                 cudaStream_t stream);
/// dst = src, `bytes` of device memory, as a kernel: for small copies a launch costs the host less than
/// cudaMemcpyAsync (bench/cuda/call_cost.cpp; docs/gpu.md).
void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
/// buffer[i] /= divisor (floating types only).
void divide(void* buffer, size_t count, DataType type, int divisor, cudaStream_t stream);

/// Loads every kernel above into the current device's context now. Under CUDA's lazy loading (the default since
/// 12.2, and what torch sets) a kernel's first launch may wait for the whole context to go idle, so it must not
/// first happen while a flag-wait kernel spins for it (see device/cuda/cuda_queue.hpp): a deadlock until the wait's
/// budget runs out. NCCL loads its kernels up front for the same reason.
void load_kernels();

}  // namespace hiercoll::reduce::cuda
