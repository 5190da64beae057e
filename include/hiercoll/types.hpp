#pragma once
#include <cstddef>
#include <cstdint>

#include "hiercoll/export.hpp"

namespace hiercoll {

/// Element types of collective buffers.
enum class DataType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64 };
inline constexpr int kNumDataTypes = 8;

/// Reductions. kAvg is a sum divided by the number of ranks, defined on floating types only.
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };
inline constexpr int kNumReduceOps = 5;

HIERCOLL_API size_t dtype_size(DataType type);
HIERCOLL_API bool is_floating(DataType type);
HIERCOLL_API const char* to_string(DataType type);
HIERCOLL_API const char* to_string(ReduceOp op);

}  // namespace hiercoll
