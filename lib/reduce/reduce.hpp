#pragma once
// Element-wise reduction kernels on host memory, picked at run time for the CPU (AVX-512, AVX2, scalar).
// fp16 and bf16 are reduced in fp32 and rounded once per call (round to nearest even).
// Integer sums and products wrap around, as in NCCL.
#include <cstddef>

#include "hiercoll/types.hpp"

namespace hiercoll::reduce {

enum class Isa { kScalar, kAvx2, kAvx512 };

/// How a kernel writes its result. kAuto: kStreaming where the result is at least stream_bytes(), else kCached.
/// kStreaming writes it with non-temporal stores, past the caches: an ordinary store to a line the cache lacks first
/// reads that line from memory, so a result too large to stay in cache costs a third more memory traffic than the
/// two reads and one write a two-source reduction needs (and evicts its sources). The result is in memory, ordered
/// before whatever the caller stores next, when the call returns.
enum class Stores { kAuto, kCached, kStreaming };

/// dst[i] = a[i] op b[i] for i < count. dst may be a or b (exactly), never partially overlap them.
/// kAvg reduces like kSum; finish an average with divide().
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);
/// dst[i] = sources[0][i] op sources[1][i] op ... op sources[n-1][i] (in that order), n >= 2, in blocks that stay in
/// this core's L1 cache between the n-1 reductions (a result small enough to stay there whole, in whole passes), so
/// each line of dst is written to memory once however many sources there are. dst may be one of the sources exactly.
/// `copy`, when not null, receives the result too, in the same pass: it may be one of the sources exactly, never dst.
/// Each block of the result is written to dst first and copied from there to `copy` in whole blocks, so dst is best
/// this core's own memory and `copy` the lines another core reads next: a store to a line another core holds waits
/// for that core to give it up, and a plain copy of whole lines (glibc's memcpy: rep movsb) waits for them far less
/// than a kernel's vector stores do, most of all where the cores share no cache (docs/experiments.md, "Publishing a
/// reduced shard by copy"); the copy is publish()'s, which streams it in a spell of slow copies.
void reduce_sources(void* dst, const void* const* sources, int n, size_t count, DataType type, ReduceOp op,
                    void* copy = nullptr, Stores stores = Stores::kAuto);
/// dst <- src (not overlapping), where dst is lines other cores read next: a node's shared areas. With glibc's memcpy,
/// unless this thread's recent such copies ran slower than a non-temporal copy would: a store to a line another core
/// holds waits for that core to give it up, and on some hosts, at times, that wait alone makes memcpy several times
/// slower than non-temporal stores, which take no line from anyone (docs/experiments.md, "Publishing into lines
/// another core holds"). A thread that measures slow copies (PublishPolicy in dispatch.cpp) streams its copies for a
/// while, then tries memcpy again. dst's contents are in memory, ordered before the caller's next store, on return.
void publish(void* dst, const void* src, size_t bytes);
/// Whether this thread's publish() streams now (for tests and benchmarks).
bool publish_streams();
/// Makes this thread's next `copies` publish() calls of 4 KB or more stream, as a spell of slow copies would (for
/// tests and benchmarks).
void publish_stream_spell(unsigned copies);
/// buffer[i] /= divisor. Floating types only.
void divide(void* buffer, size_t count, DataType type, int divisor);

/// The instruction set the dispatcher chose (HIERCOLL_CPU_ISA=scalar|avx2|avx512 lowers it).
Isa active_isa();
const char* to_string(Isa isa);
bool isa_supported(Isa isa);
/// reduce() with one instruction set's kernels, for tests and benchmarks. Requires isa_supported(isa).
void reduce_with(Isa isa, void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                 Stores stores = Stores::kAuto);
/// The largest cache cpu0's data reaches (the highest level sysfs lists), or 32 MB where sysfs lists none. Read
/// once.
size_t last_level_cache_bytes();
/// The size of result from which kAuto streams: HIERCOLL_STREAM_BYTES, else a quarter of the last-level cache
/// (results that large and their sources cannot all stay there). 0: never.
size_t stream_bytes();
/// Whether a result of `bytes` written as `stores` says goes past the caches.
bool streamed(Stores stores, size_t bytes);

/// fp16 / bf16 conversions shared by kernels and tests (round to nearest even; NaN stays NaN).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace hiercoll::reduce
