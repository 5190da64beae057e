// Picks the kernel table for this CPU once, and checks arguments before any kernel runs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/settings.hpp"
#include "hiercoll/errors.hpp"
#include "reduce/cpu/half.hpp"
#include "reduce/cpu/kernel_table.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::reduce {
namespace {

// Each table is made only when first asked for: make_kernel_table() is compiled for its instruction set, so
// even filling the table may use instructions this CPU lacks (AVX-512 stores did, on an AVX2-only machine).
const KernelTable& table_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: {
      static const KernelTable table = avx512::make_kernel_table();
      return table;
    }
    case Isa::kAvx2: {
      static const KernelTable table = avx2::make_kernel_table();
      return table;
    }
    default: {
      static const KernelTable table = scalar::make_kernel_table();
      return table;
    }
  }
}

Isa choose_isa() {
  Isa best = isa_supported(Isa::kAvx512) ? Isa::kAvx512 : isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar;
  const std::string& wanted = base::process_settings().cpu_isa;  // validated there
  if (wanted.empty()) return best;
  Isa requested = wanted == "scalar" ? Isa::kScalar : wanted == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
  if (!isa_supported(requested)) throw InvalidUsageError("HIERCOLL_CPU_ISA=" + wanted + ": this CPU lacks it");
  return requested;
}

void check_op(DataType type, ReduceOp op) {
  if (static_cast<int>(type) >= kNumDataTypes) {
    throw InvalidUsageError("unknown data type " + std::to_string(static_cast<int>(type)));
  }
  if (static_cast<int>(op) >= kNumReduceOps) {
    throw InvalidUsageError("unknown reduce op " + std::to_string(static_cast<int>(op)));
  }
}

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa active_isa() {
  static const Isa isa = choose_isa();
  return isa;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void reduce_with(Isa isa, void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  check_op(type, op);
  if (count == 0) return;
  table_for(isa).reduce[static_cast<size_t>(type)][static_cast<size_t>(op)](dst, a, b, count);
}

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  reduce_with(active_isa(), dst, a, b, count, type, op);
}

void reduce_sources(void* dst, const void* const* sources, int n, size_t count, DataType type, ReduceOp op,
                    void* copy) {
  check_op(type, op);
  if (n < 2) throw InvalidUsageError("reduce_sources: " + std::to_string(n) + " sources, needs two or more");
  if (count == 0) return;
  const ReduceFn fn = table_for(active_isa()).reduce[static_cast<size_t>(type)][static_cast<size_t>(op)];
  if (n == 2 && copy == nullptr) return fn(dst, sources[0], sources[1], count);
  // A block of each source and of the result stay in L1 (48 KB or more on current x86 cores) across the sources.
  constexpr size_t kBlockBytes = 4096;
  alignas(64) uint8_t scratch[kBlockBytes];
  const size_t elem = dtype_size(type), block = kBlockBytes / elem;
  auto* out = static_cast<uint8_t*>(dst);
  auto* second = static_cast<uint8_t*>(copy);
  auto source = [&](int k, size_t at) { return static_cast<const uint8_t*>(sources[k]) + at * elem; };
  for (size_t at = 0; at < count; at += block) {
    const size_t len = std::min(block, count - at);
    // Into dst itself where that is all; with a copy, into the scratch block and from there (L1) to both: the copy
    // may be one of the sources (an in-place call's own input), read before the block is written.
    uint8_t* to = second != nullptr ? scratch : out + at * elem;
    fn(to, source(0, at), source(1, at), len);
    for (int k = 2; k < n; ++k) fn(to, to, source(k, at), len);
    if (second != nullptr) {
      std::memcpy(out + at * elem, to, len * elem);
      std::memcpy(second + at * elem, to, len * elem);
    }
  }
}

void divide(void* buffer, size_t count, DataType type, int divisor) {
  check_op(type, ReduceOp::kAvg);
  DivideFn fn = table_for(active_isa()).divide[static_cast<size_t>(type)];
  if (fn == nullptr) throw InvalidUsageError(std::string("average is not defined on ") + to_string(type));
  if (count > 0) fn(buffer, count, divisor);
}

float half_to_float(uint16_t h) { return detail::half_to_float(h); }
uint16_t float_to_half(float f) { return detail::float_to_half(f); }
float bf16_to_float(uint16_t b) { return detail::bf16_to_float(b); }
uint16_t float_to_bf16(float f) { return detail::float_to_bf16(f); }

}  // namespace hiercoll::reduce
