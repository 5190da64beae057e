// Picks the kernel table for this CPU once, and checks arguments before any kernel runs.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

namespace {

// The largest cache any core's data reaches (the highest level sysfs lists for cpu0), in bytes; 0 if unknown.
size_t read_last_level_cache_bytes() {
  size_t best = 0;
  int best_level = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    char* end = nullptr;
    size_t bytes = std::strtoull(size.c_str(), &end, 10);
    if (*end == 'K') bytes <<= 10;
    if (*end == 'M') bytes <<= 20;
    if (level > best_level) best_level = level, best = bytes;
  }
  return best;
}

// to[i] = sources[0][at + i] op ... op sources[n-1][at + i] for i < len: the sources one after the other, each pass
// over the whole range (to may be sources[0] + at exactly).
void reduce_chain(ReduceFn fn, void* to, const void* const* sources, int n, size_t at, size_t len, size_t elem) {
  auto source = [&](int k) { return static_cast<const uint8_t*>(sources[k]) + at * elem; };
  fn(to, source(0), source(1), len);
  for (int k = 2; k < n; ++k) fn(to, to, source(k), len);
}

// publish()'s choice, per thread: memcpy while copies into shared lines run at a copy's rate; non-temporal stores for
// a spell once kSlowInARow measured copies in a row ran slower than kSlowBytesPerNs, then memcpy again to see whether
// the host's state has passed (it comes and goes within minutes: docs/experiments.md, "Publishing into lines another
// core holds"). A spell that memcpy's next trial confirms is twice as long as the one before (at most kLongestSpell
// copies); a fast copy brings it back to kFirstSpell. Copies of kMeasuredBytes or more are timed; smaller ones, one in
// kSampleEvery (two clock reads would weigh on a 16 KB copy). The first kUnmeasured timed copies count for nothing:
// they fault in the pages of areas written for the first time, slow in any state.
class PublishPolicy {
 public:
  bool streaming() const { return spell_left_ > 0; }
  void stream_for(unsigned copies) { spell_left_ = copies; }

  void copy(const KernelTable& table, void* dst, const void* src, size_t bytes) {
    if (bytes < kSmallestBytes) return static_cast<void>(std::memcpy(dst, src, bytes));
    if (spell_left_ > 0) {
      --spell_left_;
      table.stream(dst, src, bytes);
      _mm_sfence();  // weakly ordered: in memory before the caller's signal
      return;
    }
    if (bytes < kMeasuredBytes && ++sampled_ % kSampleEvery != 0) return static_cast<void>(std::memcpy(dst, src, bytes));
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (measured_ < kUnmeasured) {
      ++measured_;
    } else if (static_cast<double>(bytes) >= kSlowBytesPerNs * ns) {
      slow_in_a_row_ = 0;
      next_spell_ = kFirstSpell;
    } else if (++slow_in_a_row_ >= kSlowInARow) {
      slow_in_a_row_ = 0;
      spell_left_ = next_spell_;
      next_spell_ = std::min(2 * next_spell_, kLongestSpell);
    }
  }

 private:
  static constexpr size_t kSmallestBytes = 4 << 10;  // below: a few lines, whatever the state
  static constexpr size_t kMeasuredBytes = 64 << 10;
  static constexpr unsigned kSampleEvery = 8;
  static constexpr unsigned kUnmeasured = 32;
  // Below it memcpy loses to a non-temporal copy even after what the reader pays to fetch a streamed copy from memory
  // rather than from a cache (build/bench/shared_writes; the figures in docs/experiments.md, as above).
  static constexpr double kSlowBytesPerNs = 8.0;
  static constexpr unsigned kSlowInARow = 6;
  static constexpr unsigned kFirstSpell = 64, kLongestSpell = 8192;
  unsigned spell_left_ = 0, next_spell_ = kFirstSpell, slow_in_a_row_ = 0, sampled_ = 0, measured_ = 0;
};

thread_local PublishPolicy publish_policy;

// A block of the result that reduce_blocked reduces straight into dst and then copies on to `copy`: it stays in L1
// (48 KB or more on current x86 cores) for the copy, and its sources' blocks beside it in L2.
constexpr size_t kDirectBlockBytes = 16 << 10;

// The blocked pass behind reduce_sources and the streaming reduce, so that each line of dst (and of copy) is written
// once however many sources there are:
// - a copy, ordinary stores: each 16 KB block is reduced straight into dst and copied from there to `copy` (see
//   reduce_sources for why that way round);
// - no copy, ordinary stores: each 4 KB block straight into dst, which stays in L1 across the sources;
// - streaming stores, or dst a source the chain reads after its first pass: each 4 KB block into a scratch block in
//   L1, and from there to dst and copy (non-temporal stores when `stream`).
// A copy that is one of the sources is read before its block is written in every case.
void reduce_blocked(const KernelTable& table, ReduceFn fn, void* dst, const void* const* sources, int n, size_t count,
                    size_t elem, void* copy, bool stream, bool dst_read_later) {
  auto* out = static_cast<uint8_t*>(dst);
  auto* second = static_cast<uint8_t*>(copy);
  if (second != nullptr && !stream && !dst_read_later) {
    const size_t block = kDirectBlockBytes / elem;
    for (size_t at = 0; at < count; at += block) {
      const size_t len = std::min(block, count - at);
      reduce_chain(fn, out + at * elem, sources, n, at, len, elem);
      publish_policy.copy(table, second + at * elem, out + at * elem, len * elem);
    }
    return;
  }
  constexpr size_t kBlockBytes = 4096;
  // The block starts at the first source's offset within a page. A load whose address matches an earlier store's
  // in the low 12 bits waits for that store (the core compares no more of the address first), so a block a little
  // ahead of the source in that sense would stall every load the kernel makes ahead of its stores: at the same
  // offset the two meet only a whole block apart.
  alignas(4096) uint8_t area[2 * kBlockBytes];
  uint8_t* scratch = area + (reinterpret_cast<uintptr_t>(sources[0]) % kBlockBytes) / 64 * 64;
  const size_t block = kBlockBytes / elem;
  const bool staged = stream || second != nullptr || dst_read_later;
  for (size_t at = 0; at < count; at += block) {
    const size_t len = std::min(block, count - at);
    uint8_t* to = staged ? scratch : out + at * elem;
    reduce_chain(fn, to, sources, n, at, len, elem);
    if (!staged) continue;
    for (uint8_t* target : {out, second}) {
      if (target == nullptr) continue;
      if (stream) {
        table.stream(target + at * elem, to, len * elem);
      } else {
        std::memcpy(target + at * elem, to, len * elem);
      }
    }
  }
  if (stream) _mm_sfence();  // non-temporal stores are weakly ordered: in memory before the caller's next store
}

}  // namespace

size_t last_level_cache_bytes() {
  static const size_t bytes = [] {
    const size_t read = read_last_level_cache_bytes();
    return read != 0 ? read : size_t{32} << 20;
  }();
  return bytes;
}

size_t stream_bytes() {
  static const size_t bytes = [] {
    const base::Settings& settings = base::process_settings();
    if (settings.stream_bytes_set) return static_cast<size_t>(settings.stream_bytes);
    return last_level_cache_bytes() / 4;
  }();
  return bytes;
}

bool streamed(Stores stores, size_t bytes) {
  if (stores != Stores::kAuto) return stores == Stores::kStreaming;
  const size_t from = stream_bytes();
  return from != 0 && bytes >= from;
}

namespace {

// A result this small stays in L1 across chained whole-buffer passes, so blocking it saves no memory traffic, only
// adds a kernel call per block and source (measured: docs/experiments.md, "Chained passes for small results").
constexpr size_t kChainedBytes = 16 << 10;

// Every reduction's one path, with the kernels of `isa`: one destination in ordinary stores, from two sources or
// into a result of at most kChainedBytes, goes straight to the kernel, source after source; everything else
// through the blocked pass.
void reduce_on(Isa isa, void* dst, const void* const* sources, int n, size_t count, DataType type, ReduceOp op,
               void* copy, Stores stores) {
  check_op(type, op);
  if (n < 2) throw InvalidUsageError("reduce_sources: " + std::to_string(n) + " sources, needs two or more");
  if (count == 0) return;
  const KernelTable& table = table_for(isa);
  const ReduceFn fn = table.reduce[static_cast<size_t>(type)][static_cast<size_t>(op)];
  const size_t elem = dtype_size(type);
  const bool stream = streamed(stores, count * elem);
  // dst as one of the sources after the second: the chain reads it there once it holds a partial result.
  const bool dst_read_later = std::find(sources + std::min(n, 2), sources + n, dst) != sources + n;
  if (copy == nullptr && !stream && !dst_read_later && (n == 2 || count * elem <= kChainedBytes)) {
    return reduce_chain(fn, dst, sources, n, 0, count, elem);
  }
  reduce_blocked(table, fn, dst, sources, n, count, elem, copy, stream, dst_read_later);
}

}  // namespace

void reduce_with(Isa isa, void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                 Stores stores) {
  const void* sources[2] = {a, b};
  reduce_on(isa, dst, sources, 2, count, type, op, nullptr, stores);
}

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  reduce_with(active_isa(), dst, a, b, count, type, op);
}

void reduce_sources(void* dst, const void* const* sources, int n, size_t count, DataType type, ReduceOp op, void* copy,
                    Stores stores) {
  reduce_on(active_isa(), dst, sources, n, count, type, op, copy, stores);
}

void publish(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) publish_policy.copy(table_for(active_isa()), dst, src, bytes);
}

bool publish_streams() { return publish_policy.streaming(); }

void publish_stream_spell(unsigned copies) { publish_policy.stream_for(copies); }

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
