#pragma once
// An error as data, to carry from one thread to another. The exception object is made anew in the thread
// that rethrows it, so none is shared between threads (libstdc++'s exception_ptr reference counting is
// invisible to ThreadSanitizer and reads as a race).
#include <optional>
#include <string>

#include "hiercoll/errors.hpp"

namespace hiercoll::base {

struct Failure {
  /// The peer a PeerLostError names.
  struct Lost {
    int rank;
    bool connection_closed;
  };
  ErrorCode code;
  std::string message;
  std::optional<Lost> lost = std::nullopt;  // with code kRemoteError only
  static Failure of(const Error& e);
};

/// Throws the hiercoll::Error subclass that matches `failure.code` (PeerLostError where `lost` is set).
[[noreturn]] void throw_failure(const Failure& failure);

}  // namespace hiercoll::base
