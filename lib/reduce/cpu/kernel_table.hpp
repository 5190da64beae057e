#pragma once
// One function per (data type, op), filled once per instruction set.
#include <cstddef>

#include "hiercoll/types.hpp"

namespace hiercoll::reduce {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
using DivideFn = void (*)(void* buffer, size_t count, int divisor);

struct KernelTable {
  ReduceFn reduce[kNumDataTypes][kNumReduceOps];
  DivideFn divide[kNumDataTypes];
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
