#include "store/socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::store {
namespace {

[[noreturn]] void throw_errno(const std::string& what) { throw SystemError(what + ": " + std::strerror(errno)); }

addrinfo* resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) throw SystemError("store: cannot resolve '" + host + "': " + gai_strerror(rc));
  return result;
}

}  // namespace

void Socket::send_all(const void* data, size_t size) {
  auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd(), bytes, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("store: send");
    }
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

void Socket::recv_all(void* data, size_t size, Clock::time_point deadline) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw TimeoutError("store: no reply from the store server in time");
    pollfd pfd{fd(), POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) throw_errno("store: poll");
    if (rc <= 0) continue;
    ssize_t n = ::recv(fd(), bytes, size, 0);
    if (n == 0) throw SystemError("store: the store server closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw_errno("store: recv");
    }
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

base::UniqueFd Socket::spare_descriptor() { return base::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)); }

Socket Socket::accept_from(const Socket& listener, int flags, base::UniqueFd& spare) {
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, flags);
    if (fd >= 0) return Socket(fd);
    if (errno == EINTR) continue;
    if (errno != EMFILE && errno != ENFILE) return Socket();
    const int error = errno;
    spare.reset();
    const int shed = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (shed >= 0) ::close(shed);
    spare = spare_descriptor();
    HIERCOLL_LOG(kWarn, "closed an incoming connection on port " << listener.local_port() << ": "
                            << std::strerror(error) << " (the open-file limit, RLIMIT_NOFILE, is too low for this job)");
    return Socket();
  }
}

Socket Socket::listen_on(const std::string& host, uint16_t port) {
  addrinfo* list = resolve(host, port, true);
  std::string last_error = "no address";
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Socket sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!sock.valid()) continue;
    int one = 1;
    setsockopt(sock.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(sock.fd(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(sock.fd(), 1024) == 0) {
      freeaddrinfo(list);
      return sock;
    }
    last_error = std::strerror(errno);
  }
  freeaddrinfo(list);
  throw SystemError("store: cannot listen on " + host + ":" + std::to_string(port) + ": " + last_error);
}

Socket Socket::try_connect(const std::string& host, uint16_t port) {
  addrinfo* list = resolve(host, port, false);
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Socket sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!sock.valid()) continue;
    if (::connect(sock.fd(), ai->ai_addr, ai->ai_addrlen) == 0) {
      int one = 1;
      setsockopt(sock.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      freeaddrinfo(list);
      return sock;
    }
  }
  freeaddrinfo(list);
  return Socket();
}

Socket Socket::connect_within(const std::string& ipv4, uint16_t port, std::chrono::milliseconds timeout) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, ipv4.c_str(), &sa.sin_addr) != 1) return Socket();
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return Socket();
  if (::connect(sock.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) return Socket();
    pollfd pfd{sock.fd(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, timeout.count())));
    } while (rc < 0 && errno == EINTR);
    int error = 0;
    socklen_t length = sizeof error;
    if (rc <= 0 || getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      errno = rc == 0 ? ETIMEDOUT : error != 0 ? error : errno;
      return Socket();
    }
  }
  int one = 1;
  setsockopt(sock.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return sock;
}

uint16_t Socket::local_port() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw_errno("store: getsockname");
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

}  // namespace hiercoll::store
