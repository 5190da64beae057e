#pragma once
// One function per (data type, op), filled once per instruction set.
#include <cstddef>

#include "hiercoll/types.hpp"

namespace hiercoll::reduce {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
using DivideFn = void (*)(void* buffer, size_t count, int divisor);
/// Copies `bytes` with non-temporal stores (the lines dst starts and ends inside, with ordinary ones). Not ordered
/// before later stores: the caller fences (_mm_sfence) before anyone may read dst.
using StreamFn = void (*)(void* dst, const void* src, size_t bytes);

struct KernelTable {
  ReduceFn reduce[kNumDataTypes][kNumReduceOps];
  DivideFn divide[kNumDataTypes];
  StreamFn stream;
};

namespace scalar {
KernelTable make_kernel_table();
}
namespace avx2 {
KernelTable make_kernel_table();
}
namespace avx512 {
KernelTable make_kernel_table();
}

}  // namespace hiercoll::reduce
