#include "transport/unix/unix_endpoint.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "base/unique_fd.hpp"
#include "hiercoll/errors.hpp"
#include "transport/matching.hpp"

namespace hiercoll::transport {
namespace {

// Starts every published address and every connection's first bytes: an address of another provider (ranks that
// disagree on whether libfabric loaded) or a stray connection is refused, not misread.
constexpr char kMagic[8] = {'h', 'c', '-', 'u', 'n', 'i', 'x', '1'};

struct Hello {
  char magic[sizeof kMagic];
  int32_t rank;
  uint32_t reserved;
};
struct Header {
  uint64_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) <= sizeof(Hello), "Incoming::head holds either");

using UnixRequest = MatchedRequest;
using UnixRequestPtr = std::shared_ptr<UnixRequest>;

// A message read before its receive was posted.
struct Arrival {
  int source = -1;
  Tag tag = 0;
  std::vector<uint8_t> data;
};

// A peer's messages to this rank: a hello naming the peer, then frames (header, payload).
struct Incoming {
  base::UniqueFd fd;
  int source = -1;  // from the hello
  bool hello_read = false;
  uint8_t head[sizeof(Hello)];  // the hello or the header being read
  size_t head_got = 0;
  bool in_payload = false;
  Header header{};
  size_t payload_got = 0;
  UnixRequestPtr target;      // the receive the message goes to, matched when its header arrived
  std::vector<uint8_t> held;  // the payload, where it cannot go to the receive's buffer (unexpected, truncated)
  bool discard = false;       // its receive was cancelled: the rest of the payload is read and dropped
};

// This rank's messages to one peer, in posting order. The hello goes first on a new connection.
struct Outgoing {
  struct Send {
    UnixRequestPtr request;
    Header header;
    const uint8_t* data;
    size_t sent = 0;  // of header and payload
  };
  base::UniqueFd fd;
  Hello hello{};
  size_t hello_sent = sizeof(Hello);  // all of it: nothing to send before a connection exists
  std::deque<Send> queue;
  bool watching_writable = false;
  std::string gone;  // why nothing more can be sent ("" while the peer can be reached)
};

// epoll's data: the listener, the wake eventfd, or a connection (kind in the high bits, its index in the low ones).
constexpr uint64_t kListener = 1, kWake = 2, kIncoming = uint64_t{1} << 32, kOutgoing = uint64_t{2} << 32;
constexpr uint64_t kIndexMask = (uint64_t{1} << 32) - 1;

class UnixEndpoint final : public Endpoint {
 public:
  UnixEndpoint() {
    listener_ = base::UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listener_.valid()) throw SystemError(std::string("unix endpoint: socket: ") + std::strerror(errno));
    // Autobind: an address of the family alone makes the kernel pick a free abstract name.
    sockaddr_un bound{};
    bound.sun_family = AF_UNIX;
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&bound), sizeof(sa_family_t)) != 0) {
      throw SystemError(std::string("unix endpoint: bind: ") + std::strerror(errno));
    }
    socklen_t length = sizeof name_;
    if (::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&name_), &length) != 0) {
      throw SystemError(std::string("unix endpoint: getsockname: ") + std::strerror(errno));
    }
    name_length_ = length;
    if (::listen(listener_.get(), SOMAXCONN) != 0) {
      throw SystemError(std::string("unix endpoint: listen: ") + std::strerror(errno));
    }
    wake_fd_ = base::UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    epoll_ = base::UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    if (!wake_fd_.valid() || !epoll_.valid()) {
      throw SystemError(std::string("unix endpoint: eventfd/epoll: ") + std::strerror(errno));
    }
    watch(listener_.get(), EPOLLIN, kListener);
    watch(wake_fd_.get(), EPOLLIN, kWake);
  }

  ~UnixEndpoint() override { cancel_all("endpoint closed"); }

  std::string provider() const override { return "unix"; }
  std::string domain() const override { return "unix"; }

  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> bytes(sizeof kMagic + name_length_);
    std::memcpy(bytes.data(), kMagic, sizeof kMagic);
    std::memcpy(bytes.data() + sizeof kMagic, &name_, name_length_);
    return bytes;
  }

  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    rank_ = my_rank;
    names_.clear();
    for (size_t r = 0; r < addresses.size(); ++r) {
      const auto& a = addresses[r];
      if (a.size() <= sizeof kMagic || a.size() > sizeof kMagic + sizeof(sockaddr_un) ||
          std::memcmp(a.data(), kMagic, sizeof kMagic) != 0) {
        throw FabricError("rank " + std::to_string(r) +
                          " published an address that is not a unix endpoint's: the ranks of this job opened different "
                          "providers (one without libfabric, another with it?). Set HIERCOLL_FABRIC_PROVIDER alike on "
                          "every rank");
      }
      names_.emplace_back(a.begin() + sizeof kMagic, a.end());
    }
    outgoing_.clear();
    outgoing_.resize(addresses.size());
    source_gone_.assign(addresses.size(), std::string());
  }

  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override {
    auto request = MatchedRequest::send(peer, tag, bytes);
    check_peer(peer);
    Outgoing& out = outgoing_[static_cast<size_t>(peer)];
    if (!out.gone.empty()) {
      fail_request(*request, out.gone);
      return request;
    }
    out.queue.push_back({request, Header{tag, bytes}, static_cast<const uint8_t*>(buffer), 0});
    if (out.queue.size() == 1) send_some(peer);
    return request;
  }

  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    auto request = MatchedRequest::receive(peer, tag, ignore, buffer, bytes);
    if (peer >= 0) check_peer(peer);
    Arrival arrived;
    if (matching_.take_unexpected(*request, arrived)) {
      deliver(*request, arrived.source, arrived.tag, arrived.data);
    } else if (peer >= 0 && !source_gone_[static_cast<size_t>(peer)].empty()) {
      fail_request(*request, source_gone_[static_cast<size_t>(peer)]);
    } else {
      matching_.post(request);
    }
    return request;
  }

  bool progress(std::chrono::microseconds max_block) override {
    const uint64_t before = completions_;
    const bool woken = poll_events(0);
    if (woken || completions_ != before || max_block.count() <= 0) return woken || completions_ != before;
    const auto deadline = std::chrono::steady_clock::now() + max_block;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      // A connection refused for a full backlog is tried again within the millisecond.
      const int64_t ms = retrying_ ? 1 : std::max<int64_t>(1, (left.count() + 999) / 1000);
      if (poll_events(static_cast<int>(ms))) return true;  // woken
      if (completions_ != before) return true;
    }
  }

  // The epoll descriptor is readable while any socket it watches is; a connect retried within the millisecond.
  WaitHint wait_hint() override {
    WaitHint hint;
    hint.fd = epoll_.get();
    if (retrying_) hint.within = std::chrono::microseconds(1000);
    return hint;
  }

  void wake() override {
    const uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof one) < 0) {
    }  // the counter is saturated: a wake is pending anyway
  }

  void cancel_all(const std::string& reason) override {
    matching_.fail_receives([&](UnixRequest& r) { fail_request(r, reason); });
    for (auto& in : incoming_) {
      if (in && in->target) {
        fail_request(*in->target, reason);
        in->target.reset();
        in->discard = in->in_payload;  // the buffer may be freed now: the rest of the payload is dropped
      }
    }
    for (size_t peer = 0; peer < outgoing_.size(); ++peer) {
      Outgoing& out = outgoing_[peer];
      if (out.queue.empty()) continue;
      // A frame half written cannot be taken back: the connection closes, and the peer sees it end mid-message.
      if (out.queue.front().sent > 0) close_outgoing(peer, reason);
      for (auto& send : out.queue) fail_request(*send.request, reason);
      out.queue.clear();
    }
  }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || static_cast<size_t>(peer) >= names_.size()) {
      throw InvalidUsageError("unix endpoint: no rank " + std::to_string(peer) + " among " +
                              std::to_string(names_.size()));
    }
  }

  void watch(int fd, uint32_t events, uint64_t key) {
    epoll_event event{};
    event.events = events;
    event.data.u64 = key;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      throw SystemError(std::string("unix endpoint: epoll_ctl: ") + std::strerror(errno));
    }
  }

  void rewatch(int fd, uint32_t events, uint64_t key) {
    epoll_event event{};
    event.events = events;
    event.data.u64 = key;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event);
  }

  // One epoll_wait of at most `timeout_ms`, then what it reported; true if woken.
  bool poll_events(int timeout_ms) {
    if (retrying_) retry_connects();
    epoll_event events[64];
    const int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kListener) {
        accept_all();
      } else if (key == kWake) {
        uint64_t count;
        if (::read(wake_fd_.get(), &count, sizeof count) < 0) {
        }  // drained, or nothing to drain
        woken = true;
      } else if ((key & ~kIndexMask) == kIncoming) {
        read_some(static_cast<size_t>(key & kIndexMask));
      } else if ((key & ~kIndexMask) == kOutgoing) {
        const size_t peer = static_cast<size_t>(key & kIndexMask);
        if (events[i].events & (EPOLLHUP | EPOLLERR)) {
          close_outgoing(peer, "rank " + std::to_string(peer) + " closed its connection from rank " +
                                   std::to_string(rank_) + " (its process ended or its communicator closed)");
        } else {
          send_some(static_cast<int>(peer));
        }
      }
    }
    return woken;
  }

  void accept_all() {
    for (;;) {
      base::UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) return;  // EAGAIN: none left; anything else (EMFILE) leaves it in the backlog for later
      auto in = std::make_unique<Incoming>();
      in->fd = std::move(fd);
      const size_t index = incoming_.size();
      watch(in->fd.get(), EPOLLIN | EPOLLRDHUP, kIncoming | index);
      incoming_.push_back(std::move(in));
      read_some(index);
    }
  }

  // Reads what `incoming_[index]` has, message by message, until the socket has nothing more now.
  void read_some(size_t index) {
    Incoming* in = incoming_[index].get();
    if (!in) return;
    for (;;) {
      uint8_t* into;
      size_t want;
      if (!in->in_payload) {  // the hello, then each header
        const size_t size = in->hello_read ? sizeof(Header) : sizeof(Hello);
        into = in->head + in->head_got;
        want = size - in->head_got;
      } else {
        const size_t left = in->header.bytes - in->payload_got;
        if (in->discard) {
          into = drop_.data();
          want = std::min(left, drop_.size());
        } else {
          into = (in->target && in->held.empty() ? static_cast<uint8_t*>(in->target->buffer) : in->held.data()) +
                 in->payload_got;
          want = left;
        }
      }
      const ssize_t got = ::recv(in->fd.get(), into, want, MSG_DONTWAIT);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (got <= 0) {
        close_incoming(index, got == 0 ? std::string("closed") : std::strerror(errno));
        return;
      }
      if (!in->in_payload) {
        in->head_got += static_cast<size_t>(got);
        if (!in->hello_read) {
          if (in->head_got < sizeof(Hello)) continue;
          if (!take_hello(*in)) {
            close_incoming(index, "");  // not one of ours: dropped
            return;
          }
        } else if (in->head_got == sizeof(Header)) {
          std::memcpy(&in->header, in->head, sizeof(Header));
          in->head_got = 0;
          start_message(*in);
        }
      } else {
        in->payload_got += static_cast<size_t>(got);
      }
      if (in->in_payload && in->payload_got == in->header.bytes) finish_message(*in);
    }
  }

  bool take_hello(Incoming& in) {
    Hello hello;
    std::memcpy(&hello, in.head, sizeof hello);
    in.head_got = 0;
    if (std::memcmp(hello.magic, kMagic, sizeof kMagic) != 0 || hello.rank < 0 ||
        static_cast<size_t>(hello.rank) >= names_.size()) {
      return false;
    }
    in.source = hello.rank;
    in.hello_read = true;
    return true;
  }

  // A header arrived: the message goes to the first posted receive that matches it, straight into its buffer where
  // it fits; else it is held until finish_message.
  void start_message(Incoming& in) {
    in.in_payload = true;
    in.payload_got = 0;
    in.discard = false;
    in.target = matching_.take_receive(in.source, in.header.tag);
    if (!in.target || in.header.bytes > in.target->bytes_posted) in.held.resize(in.header.bytes);
  }

  void finish_message(Incoming& in) {
    in.in_payload = false;
    if (in.discard) {
      in.discard = false;
    } else if (in.target) {
      in.target->source = in.source;
      in.target->tag = in.header.tag;
      if (in.held.empty()) {  // read straight into the receive's buffer
        complete_request(*in.target, in.header.bytes);
      } else {
        fail_request(*in.target, truncation_error(in.header.bytes, in.target->bytes_posted));
      }
      ++completions_;
    } else if (auto receive = matching_.take_receive(in.source, in.header.tag)) {
      deliver(*receive, in.source, in.header.tag, in.held);  // posted while the payload was being read
      ++completions_;
    } else {
      matching_.arrive(Arrival{in.source, in.header.tag, std::move(in.held)});
      ++completions_;  // for a waiter whose receive is about to be posted
    }
    in.target.reset();
    in.held = std::vector<uint8_t>();
  }

  // A peer's stream ended (its process ended, or its communicator closed): a message it left half sent fails its
  // receive, and every receive posted from it, now or later, fails at once. Messages that arrived whole stay.
  void close_incoming(size_t index, const std::string& how) {
    Incoming& in = *incoming_[index];
    if (in.hello_read) {
      const std::string why = "rank " + std::to_string(in.source) + " closed its connection to rank " +
                              std::to_string(rank_) + " (" + how + "; its process ended or its communicator closed)";
      if (in.target) {
        fail_request(*in.target, why + " in the middle of a message");
        ++completions_;
      }
      auto& gone = source_gone_[static_cast<size_t>(in.source)];
      if (gone.empty()) gone = why;
      matching_.fail_receives_from(in.source, [&](UnixRequest& r) {
        fail_request(r, why);
        ++completions_;
      });
    }
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, in.fd.get(), nullptr);
    incoming_[index].reset();
  }

  // Writes what `peer`'s queue holds until the socket takes no more; connects first where no connection exists.
  void send_some(int peer) {
    Outgoing& out = outgoing_[static_cast<size_t>(peer)];
    if (!out.fd.valid() && !open_outgoing(peer)) return;
    while (!out.queue.empty()) {
      auto& send = out.queue.front();
      iovec parts[3];
      int count = 0;
      if (out.hello_sent < sizeof(Hello)) {
        parts[count++] = {reinterpret_cast<uint8_t*>(&out.hello) + out.hello_sent, sizeof(Hello) - out.hello_sent};
      }
      size_t sent = send.sent;
      if (sent < sizeof(Header)) {
        parts[count++] = {reinterpret_cast<uint8_t*>(&send.header) + sent, sizeof(Header) - sent};
        sent = 0;
      } else {
        sent -= sizeof(Header);
      }
      if (send.header.bytes > sent) {
        parts[count++] = {const_cast<uint8_t*>(send.data) + sent, send.header.bytes - sent};
      }
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = static_cast<size_t>(count);
      const ssize_t wrote = ::sendmsg(out.fd.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch_writable(peer, true);
        return;
      }
      if (wrote < 0) {
        close_outgoing(static_cast<size_t>(peer), "rank " + std::to_string(rank_) + " lost its connection to rank " +
                                                      std::to_string(peer) + " (" + std::strerror(errno) + ")");
        return;
      }
      size_t left = static_cast<size_t>(wrote);
      const size_t hello_part = std::min(left, sizeof(Hello) - out.hello_sent);
      out.hello_sent += hello_part;
      left -= hello_part;
      send.sent += left;
      if (send.sent == sizeof(Header) + send.header.bytes) {
        complete_request(*send.request, send.header.bytes);
        ++completions_;
        out.queue.pop_front();
      }
    }
    watch_writable(peer, false);
  }

  // Connects to `peer`; false where that cannot be done now (a full backlog: tried again) or ever (failed).
  bool open_outgoing(int peer) {
    Outgoing& out = outgoing_[static_cast<size_t>(peer)];
    base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const auto& name = names_[static_cast<size_t>(peer)];
    int rc = -1;
    if (fd.valid()) {
      rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(name.data()), static_cast<socklen_t>(name.size()));
    }
    if (rc != 0 && errno == EAGAIN) {  // the peer's backlog is full until it accepts
      retrying_ = true;
      return false;
    }
    if (rc != 0) {
      close_outgoing(static_cast<size_t>(peer), "rank " + std::to_string(rank_) + " cannot reach rank " +
                                                    std::to_string(peer) + " (connect: " + std::strerror(errno) +
                                                    "; its process ended or it is on another host)");
      return false;
    }
    out.fd = std::move(fd);
    std::memcpy(out.hello.magic, kMagic, sizeof kMagic);
    out.hello.rank = rank_;
    out.hello_sent = 0;
    watch(out.fd.get(), 0, kOutgoing | static_cast<uint64_t>(peer));  // hang-ups are reported whatever the events
    return true;
  }

  void retry_connects() {
    retrying_ = false;
    for (size_t peer = 0; peer < outgoing_.size(); ++peer) {
      Outgoing& out = outgoing_[peer];
      if (!out.fd.valid() && out.gone.empty() && !out.queue.empty()) send_some(static_cast<int>(peer));
    }
  }

  void watch_writable(int peer, bool on) {
    Outgoing& out = outgoing_[static_cast<size_t>(peer)];
    if (out.watching_writable == on || !out.fd.valid()) return;
    out.watching_writable = on;
    rewatch(out.fd.get(), on ? static_cast<uint32_t>(EPOLLOUT) : 0u, kOutgoing | static_cast<uint64_t>(peer));
  }

  // Nothing more reaches `peer`: what is queued for it fails, and so will every later send.
  void close_outgoing(size_t peer, const std::string& why) {
    Outgoing& out = outgoing_[peer];
    if (out.gone.empty()) out.gone = why;
    for (auto& send : out.queue) {
      fail_request(*send.request, why);
      ++completions_;
    }
    out.queue.clear();
    if (out.fd.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, out.fd.get(), nullptr);
    out.fd.reset();
    out.watching_writable = false;
  }

  base::UniqueFd listener_, wake_fd_, epoll_;
  sockaddr_un name_{};
  socklen_t name_length_ = 0;
  int rank_ = -1;
  std::vector<std::vector<uint8_t>> names_;  // each rank's sockaddr_un, as long as it was bound
  std::vector<Outgoing> outgoing_;           // by peer
  std::vector<std::unique_ptr<Incoming>> incoming_;  // by the order they were accepted; null once closed
  std::vector<std::string> source_gone_;             // by peer: why nothing more comes from it ("" while it may)
  TagMatching<Arrival> matching_;
  std::array<uint8_t, 64 << 10> drop_;  // where a cancelled receive's payload is read to be dropped
  uint64_t completions_ = 0;  // requests completed or failed, and messages held for a receive not yet posted
  bool retrying_ = false;     // a connect waits for room in a peer's backlog
};

}  // namespace

std::unique_ptr<Endpoint> open_unix_endpoint() { return std::make_unique<UnixEndpoint>(); }

}  // namespace hiercoll::transport
