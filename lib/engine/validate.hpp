#pragma once
// Argument checks on the caller's thread: bad input is an immediate InvalidUsageError that names the call and
// the problem, and leaves the communicator usable. `op` names the call in the message.
#include <cstddef>

#include "hiercoll/types.hpp"

namespace hiercoll::engine {

/// count x element size (x multiplier), refusing unknown types and sizes that overflow the address space.
size_t checked_bytes(const char* op, size_t count, DataType type, size_t multiplier = 1);
/// A buffer of `bytes` (none if 0) must be non-null and aligned to its element.
void check_buffer(const char* op, const char* name, const void* buffer, size_t bytes, DataType type);
/// In and out may be the same buffer (`in` at `in_place_at`) or disjoint, never partly overlapping.
void check_overlap(const char* op, const void* in, size_t in_bytes, const void* out, size_t out_bytes,
                   const void* in_place_at);
/// A known reduce op, and avg only on floating types.
void check_op(const char* op, DataType type, ReduceOp reduce_op);
void check_rank(const char* op, const char* what, int rank, int size);
/// Point-to-point runs beside the collectives on the progress thread, with no stream to order it by: host only.
void check_host(const char* op, const void* buffer, size_t bytes);

}  // namespace hiercoll::engine
