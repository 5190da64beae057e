#pragma once
#include <stdexcept>
#include <string>

#include "hiercoll/export.hpp"

namespace hiercoll {

/// What went wrong, in a form the C API and the Python binding translate to codes.
enum class ErrorCode : int {
  kInvalidUsage = 1,  ///< The caller passed something wrong. Fix the call; the communicator is still usable.
  kTimeout = 2,       ///< A peer did not answer in time. The communicator is broken: abort it and make a new one.
  kRemoteError = 3,   ///< A peer failed or disappeared. The communicator is broken.
  kSystemError = 4,   ///< An operating-system call failed (socket, file, shared memory).
  kFabricError = 5,   ///< A libfabric call or completion failed.
  kCudaError = 6,     ///< A CUDA call failed.
  kInternal = 7,      ///< A bug in hiercoll.
};

HIERCOLL_API const char* to_string(ErrorCode code);

/// Root of every exception hiercoll throws.
class HIERCOLL_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

#define HIERCOLL_DEFINE_ERROR(Name, Code)                               \
  class HIERCOLL_API Name : public Error {                              \
   public:                                                              \
    explicit Name(const std::string& message) : Error(Code, message) {} \
  };
HIERCOLL_DEFINE_ERROR(InvalidUsageError, ErrorCode::kInvalidUsage)
HIERCOLL_DEFINE_ERROR(TimeoutError, ErrorCode::kTimeout)
HIERCOLL_DEFINE_ERROR(RemoteError, ErrorCode::kRemoteError)
HIERCOLL_DEFINE_ERROR(SystemError, ErrorCode::kSystemError)
HIERCOLL_DEFINE_ERROR(FabricError, ErrorCode::kFabricError)
HIERCOLL_DEFINE_ERROR(CudaError, ErrorCode::kCudaError)
HIERCOLL_DEFINE_ERROR(InternalError, ErrorCode::kInternal)
#undef HIERCOLL_DEFINE_ERROR

/// A RemoteError that names the peer it lost: the process of rank `rank()` died, aborted its communicator or went
/// silent (see the message). `connection_closed()` is true when its connection was closed (a death or an abort)
/// rather than timed out by heartbeats. Raised by every operation pending or issued after the loss is noticed.
class HIERCOLL_API PeerLostError : public RemoteError {
 public:
  PeerLostError(const std::string& message, int rank, bool connection_closed)
      : RemoteError(message), rank_(rank), connection_closed_(connection_closed) {}
  int rank() const noexcept { return rank_; }
  bool connection_closed() const noexcept { return connection_closed_; }

 private:
  int rank_;
  bool connection_closed_;
};

}  // namespace hiercoll
