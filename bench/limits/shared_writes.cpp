// shared_writes: what it costs a core to write lines another core has just read, by the kind of store, and what it
// costs that core to read them back. The one-node collectives do this at every call: a rank publishes its shard in
// lines a peer read from the same slot the time before, then the peer reads them.
//
// Two threads, pinned to two CPUs, take turns: A writes a buffer of BYTES with one kind of store, raises a flag; B
// copies the buffer into its own memory, raises a flag back. Prints, for each kind of A's store, the median time of
// A's write and of B's read (µs) and their rates (GB/s), over 300 turns; then the same for A's memcpy with each way
// B may read.
//
// A's kinds: memcpy (glibc's, as HostQueue::copy calls it), rep movsb (the string copy glibc uses from 2 KB to a size
// it derives from the cache), vector stores of a copy (AVX2), non-temporal vector stores of a copy (AVX2: past the
// caches, to memory), vector stores of a float sum of two private buffers (AVX2: a reduction kernel writing its result
// straight into the shared lines). Where the cores share no cache, how each kind waits for the other core to give up
// its lines differs (docs/experiments.md, "Publishing a reduced shard by copy"); core_handover says which case a run
// met.
//
// B's ways: memcpy; memcpy and then evicting each line it read from every cache (clflushopt), so that A's next
// write finds no other core's copy; a non-temporal prefetch of each 4 KB block before copying it (the hint that the
// line should not stay in B's caches); and not reading at all (A's write to lines no other core holds, the floor).
//
//   shared_writes [BYTES [CPU_A CPU_B]]   (default: 512 KB; the first two CPUs this process may run on)
//   shared_writes --rate [BYTES [CPU_A CPU_B]]
//
// --rate: one number, A's memcpy rate into the lines B read (GB/s, median of 100 turns), as core_handover prints
// one: the benchmark scripts read the host's state from the two before each run (scripts/benchlib.py,
// machine_state), for a core may hand a line over quickly and still write slowly into lines another core holds.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cpu_pair.hpp"

namespace {

using hiercoll::bench::Line;
using hiercoll::bench::pin;
using hiercoll::bench::relax;

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void rep_movsb(void* dst, const void* src, size_t bytes) {
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes)::"memory");
}

// A copy in AVX2 vectors, 128 bytes a turn: with ordinary stores, or (kStream) non-temporal ones, past the caches.
template <bool kStream>
__attribute__((target("avx2"), always_inline)) inline void store(char* to, __m256i v) {
  if constexpr (kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to), v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), v);
  }
}

template <bool kStream>
__attribute__((target("avx2"))) void vector_copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    store<kStream>(d + i, a);
    store<kStream>(d + i + 32, b);
    store<kStream>(d + i + 64, c);
    store<kStream>(d + i + 96, e);
  }
  if constexpr (kStream) _mm_sfence();  // the flag A raises next must not pass the streamed lines
}

__attribute__((target("avx2"))) void vector_sum(float* dst, const float* a, const float* b, size_t count) {
  for (size_t i = 0; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
}

__attribute__((target("clflushopt"))) void copy_and_flush(void* dst, void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflushopt(static_cast<char*>(src) + i);
  _mm_sfence();
}

void prefetch_nta_copy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kBlock = 4096;
  for (size_t at = 0; at < bytes; at += kBlock) {
    const char* block = static_cast<const char*>(src) + at;
    for (size_t i = 0; i < kBlock; i += 64) _mm_prefetch(block + i, _MM_HINT_NTA);
    std::memcpy(static_cast<char*>(dst) + at, block, kBlock);
  }
}

enum class Kind { kMemcpy, kRepMovsb, kVectorCopy, kStreamCopy, kVectorSum };
const char* name(Kind kind) {
  switch (kind) {
    case Kind::kMemcpy: return "memcpy";
    case Kind::kRepMovsb: return "rep movsb";
    case Kind::kVectorCopy: return "vector copy";
    case Kind::kStreamCopy: return "stream copy";
    case Kind::kVectorSum: return "vector sum";
  }
  return "?";
}

enum class Read { kMemcpy, kFlush, kPrefetchNta, kNone };
const char* name(Read read) {
  switch (read) {
    case Read::kMemcpy: return "memcpy";
    case Read::kFlush: return "+ clflushopt";
    case Read::kPrefetchNta: return "prefetchnta";
    case Read::kNone: return "no read";
  }
  return "?";
}

struct Times {
  double write_ns, read_ns;
};

Times run(Kind kind, Read read_kind, size_t bytes, int cpu_a, int cpu_b, int turns) {
  auto buffer = [bytes](int fill) {
    auto* p = static_cast<char*>(std::aligned_alloc(4096, bytes));
    std::memset(p, fill, bytes);
    return p;
  };
  char *shared = buffer(1), *a_one = buffer(2), *a_two = buffer(3), *b_own = buffer(4);
  Line written, read;
  std::vector<double> writes, reads;
  std::thread reader([&] {
    pin(cpu_b);
    for (long t = 1; t <= turns; ++t) {
      while (written.value.load(std::memory_order_acquire) != t) relax();
      const double start = now_ns();
      switch (read_kind) {
        case Read::kMemcpy: std::memcpy(b_own, shared, bytes); break;
        case Read::kFlush: copy_and_flush(b_own, shared, bytes); break;
        case Read::kPrefetchNta: prefetch_nta_copy(b_own, shared, bytes); break;
        case Read::kNone: break;
      }
      reads.push_back(now_ns() - start);
      read.value.store(t, std::memory_order_release);
    }
  });
  pin(cpu_a);
  for (long t = 1; t <= turns; ++t) {
    const double start = now_ns();
    switch (kind) {
      case Kind::kMemcpy: std::memcpy(shared, a_one, bytes); break;
      case Kind::kRepMovsb: rep_movsb(shared, a_one, bytes); break;
      case Kind::kVectorCopy: vector_copy<false>(shared, a_one, bytes); break;
      case Kind::kStreamCopy: vector_copy<true>(shared, a_one, bytes); break;
      case Kind::kVectorSum:
        vector_sum(reinterpret_cast<float*>(shared), reinterpret_cast<const float*>(a_one),
                   reinterpret_cast<const float*>(a_two), bytes / sizeof(float));
        break;
    }
    writes.push_back(now_ns() - start);
    written.value.store(t, std::memory_order_release);
    while (read.value.load(std::memory_order_acquire) != t) relax();
  }
  reader.join();
  for (char* p : {shared, a_one, a_two, b_own}) std::free(p);
  // The first turns find the lines in no other core's cache: left out.
  auto median = [](std::vector<double> v) {
    v.erase(v.begin(), v.begin() + std::min<size_t>(v.size() / 10, 10));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(writes), median(reads)};
}

}  // namespace

int main(int argc, char** argv) {
  const bool rate_only = argc >= 2 && std::strcmp(argv[1], "--rate") == 0;
  if (rate_only) {
    --argc;
    ++argv;
  }
  size_t bytes = 512 << 10;
  if (argc >= 2) bytes = std::strtoull(argv[1], nullptr, 10);
  int cpu_a, cpu_b;
  if (!hiercoll::bench::cpu_pair(argc < 2 ? 0 : argc - 2, argv + 2, cpu_a, cpu_b)) {
    std::fprintf(stderr, "usage: shared_writes [--rate] [BYTES [CPU_A CPU_B]]\n");
    return 2;
  }
  if (bytes < 4096 || bytes % 4096 != 0) {
    std::fprintf(stderr, "shared_writes: BYTES must be a multiple of 4096 (got %zu)\n", bytes);
    return 2;
  }
  if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) {
    std::fprintf(stderr, "shared_writes: needs two different CPUs (got %d and %d)\n", cpu_a, cpu_b);
    return 2;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("clflushopt")) {
    std::fprintf(stderr, "shared_writes: needs AVX2 (the vector kinds) and CLFLUSHOPT (a way of reading)\n");
    return 2;
  }
  if (rate_only) {
    run(Kind::kMemcpy, Read::kMemcpy, bytes, cpu_a, cpu_b, 20);  // warms the allocator and clocks up
    std::printf("%.2f\n", bytes / run(Kind::kMemcpy, Read::kMemcpy, bytes, cpu_a, cpu_b, 100).write_ns);
    return 0;
  }
  std::printf("%zu bytes, CPUs %d and %d: A writes lines B read last turn, then B copies them out\n", bytes, cpu_a,
              cpu_b);
  std::printf("%-12s %10s %9s %10s %9s\n", "A's stores", "write µs", "GB/s", "read µs", "GB/s");
  auto print = [bytes](const char* row, Times t) {
    std::printf("%-12s %10.2f %9.1f %10.2f %9.1f\n", row, t.write_ns / 1e3, bytes / t.write_ns, t.read_ns / 1e3,
                bytes / t.read_ns);
  };
  run(Kind::kMemcpy, Read::kMemcpy, bytes, cpu_a, cpu_b, 300);  // warms the allocator and clocks up: not printed
  for (Kind kind : {Kind::kMemcpy, Kind::kRepMovsb, Kind::kVectorCopy, Kind::kStreamCopy, Kind::kVectorSum}) {
    print(name(kind), run(kind, Read::kMemcpy, bytes, cpu_a, cpu_b, 300));
  }
  std::printf("\nA writes with memcpy; B's way of reading\n");
  std::printf("%-12s %10s %9s %10s %9s\n", "B's reads", "write µs", "GB/s", "read µs", "GB/s");
  for (Read read_kind : {Read::kMemcpy, Read::kFlush, Read::kPrefetchNta, Read::kNone}) {
    const Times t = run(Kind::kMemcpy, read_kind, bytes, cpu_a, cpu_b, 300);
    if (read_kind == Read::kNone) {
      std::printf("%-12s %10.2f %9.1f %10s %9s\n", name(read_kind), t.write_ns / 1e3, bytes / t.write_ns, "-", "-");
    } else {
      print(name(read_kind), t);
    }
  }
  return 0;
}
