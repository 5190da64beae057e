#include "hiercoll/errors.hpp"

#include "base/failure.hpp"
#include "hiercoll/types.hpp"
#include "hiercoll/version.hpp"

namespace hiercoll {

const char* version() { return HIERCOLL_VERSION_STRING; }

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidUsage: return "invalid usage";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kRemoteError: return "remote error";
    case ErrorCode::kSystemError: return "system error";
    case ErrorCode::kFabricError: return "fabric error";
    case ErrorCode::kCudaError: return "CUDA error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

size_t dtype_size(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  throw InvalidUsageError("unknown data type " + std::to_string(static_cast<int>(type)));
}

bool is_floating(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt8: return "int8";
    case DataType::kUInt8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "unknown";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

base::Failure base::Failure::of(const Error& e) {
  Failure failure{e.code(), e.what()};
  if (const auto* lost = dynamic_cast<const PeerLostError*>(&e)) failure.lost = Lost{lost->rank(), lost->connection_closed()};
  return failure;
}

void base::throw_failure(const Failure& failure) {
  if (failure.lost && failure.code == ErrorCode::kRemoteError)
    throw PeerLostError(failure.message, failure.lost->rank, failure.lost->connection_closed);
  switch (failure.code) {
    case ErrorCode::kInvalidUsage: throw InvalidUsageError(failure.message);
    case ErrorCode::kTimeout: throw TimeoutError(failure.message);
    case ErrorCode::kRemoteError: throw RemoteError(failure.message);
    case ErrorCode::kSystemError: throw SystemError(failure.message);
    case ErrorCode::kFabricError: throw FabricError(failure.message);
    case ErrorCode::kCudaError: throw CudaError(failure.message);
    case ErrorCode::kInternal: break;
  }
  throw InternalError(failure.message);
}

}  // namespace hiercoll
