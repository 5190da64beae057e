#pragma once
// Small RAII helpers over POSIX sockets for the TCP store. Every call is checked; failures throw SystemError.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/unique_fd.hpp"

namespace hiercoll::store {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  int release() { return fd_.release(); }
  void close() { fd_.reset(); }

  /// Sends all bytes or throws.
  void send_all(const void* data, size_t size);
  /// Receives exactly `size` bytes before `deadline` or throws (TimeoutError, or SystemError on EOF).
  void recv_all(void* data, size_t size, Clock::time_point deadline);

  /// Listens on host:port (port 0: any free port).
  static Socket listen_on(const std::string& host, uint16_t port);
  /// Connects once; returns an invalid socket if the server is not there yet (ECONNREFUSED).
  static Socket try_connect(const std::string& host, uint16_t port);
  /// Connects to a numeric IPv4 address, giving up after `timeout` (a filtered address would otherwise hold a
  /// blocking connect for minutes); returns an invalid socket if it cannot, with errno saying why (ETIMEDOUT,
  /// ECONNREFUSED, ...). The socket is left non-blocking.
  static Socket connect_within(const std::string& ipv4, uint16_t port, std::chrono::milliseconds timeout);
  uint16_t local_port() const;
  /// accept4(listener, flags), EINTR retried; an invalid socket when there is nothing to accept or it failed. Out
  /// of descriptors (EMFILE, ENFILE), the waiting connection is accepted into `spare` (the caller's, opened with
  /// spare_descriptor() beside the listener, while descriptors were to be had) and closed, with a warning: left
  /// queued it would keep the listener readable and a poll loop spinning, and its client waiting instead of failing.
  static Socket accept_from(const Socket& listener, int flags, base::UniqueFd& spare);
  /// A descriptor to give up when accept_from runs out (/dev/null).
  static base::UniqueFd spare_descriptor();

 private:
  base::UniqueFd fd_;
};

}  // namespace hiercoll::store
