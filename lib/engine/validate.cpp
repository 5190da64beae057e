#include "engine/validate.hpp"

#include <cstdint>
#include <sstream>
#include <string>

#include "gpu/device_path.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::engine {

size_t checked_bytes(const char* op, size_t count, DataType type, size_t multiplier) {
  if (static_cast<int>(type) >= kNumDataTypes) {
    throw InvalidUsageError(std::string(op) + ": unknown data type " + std::to_string(static_cast<int>(type)));
  }
  size_t elem = dtype_size(type);
  if (count != 0 && (count > SIZE_MAX / elem / multiplier)) {
    throw InvalidUsageError(std::string(op) + ": count " + std::to_string(count) + " overflows the address space");
  }
  return count * elem * multiplier;
}

void check_buffer(const char* op, const char* name, const void* buffer, size_t bytes, DataType type) {
  if (bytes == 0) return;
  if (buffer == nullptr) throw InvalidUsageError(std::string(op) + ": " + name + " buffer is null");
  if (reinterpret_cast<uintptr_t>(buffer) % dtype_size(type) != 0) {
    std::ostringstream out;
    out << op << ": " << name << " buffer " << buffer << " is not aligned to the " << dtype_size(type) << "-byte "
        << to_string(type) << " element";
    throw InvalidUsageError(out.str());
  }
}

void check_overlap(const char* op, const void* in, size_t in_bytes, const void* out, size_t out_bytes,
                   const void* in_place_at) {
  if (in_bytes == 0 || out_bytes == 0 || in == in_place_at) return;
  auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  if (a < b + out_bytes && b < a + in_bytes) {
    throw InvalidUsageError(std::string(op) + ": input and output buffers overlap without being the in-place form");
  }
}

void check_op(const char* op, DataType type, ReduceOp reduce_op) {
  if (static_cast<int>(reduce_op) >= kNumReduceOps) {
    throw InvalidUsageError(std::string(op) + ": unknown reduce op " + std::to_string(static_cast<int>(reduce_op)));
  }
  if (reduce_op == ReduceOp::kAvg && !is_floating(type)) {
    throw InvalidUsageError(std::string(op) + ": avg is defined on floating types only, not " + to_string(type));
  }
}

void check_rank(const char* op, const char* what, int rank, int size) {
  if (rank < 0 || rank >= size) {
    throw InvalidUsageError(std::string(op) + ": " + what + " " + std::to_string(rank) + " is not a rank of this " +
                            std::to_string(size) + "-rank communicator");
  }
}

void check_host(const char* op, const void* buffer, size_t bytes) {
  if (bytes != 0 && gpu::locate(buffer).kind != device::MemoryKind::kHost) {
    throw InvalidUsageError(std::string(op) +
                            ": device buffers are not supported for point-to-point yet; copy to "
                            "host memory (the torch binding stages them)");
  }
}

}  // namespace hiercoll::engine
