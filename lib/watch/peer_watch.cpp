#include "watch/peer_watch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "base/backoff.hpp"
#include "base/log.hpp"
#include "base/text.hpp"
#include "base/unique_fd.hpp"
#include "hiercoll/errors.hpp"
#include "store/socket.hpp"
#include "topo/net.hpp"

namespace hiercoll::watch {

using Clock = std::chrono::steady_clock;
using store::Socket;

namespace {

constexpr uint32_t kMagic = 0x48435057;  // "HCPW"
constexpr size_t kTokenBytes = 16;
// Connections that have not said who they are yet: at most this many beyond the communicator's size, each for at
// most kHelloWithin. Bounds what stray clients can make the hub hold.
constexpr size_t kMaxStrangers = 64;
constexpr std::chrono::milliseconds kHelloWithin{5000};
// How often each side says it is alive, at most (a quarter of the heartbeat timeout when that is shorter).
constexpr std::chrono::milliseconds kHeartbeatEvery{1000};

enum class Type : uint16_t { kHello = 1, kWelcome, kHeartbeat, kBye, kAbort, kDeath };
// Why a rank is reported (kDeath's cause).
enum class Cause : uint16_t { kClosed = 1, kSilent, kAborted, kGarbled };

// Every frame is one fixed size: a stream that goes out of step, or a stranger's bytes, fail the magic or the
// token at once. Both ends are the same library, so fields travel in host order.
struct Frame {
  uint32_t magic = kMagic;
  Type type = Type::kHeartbeat;
  Cause cause = Cause::kClosed;
  int32_t rank = -1;  // hello: the sender; death: the rank reported
  uint32_t pid = 0;   // hello / welcome: the sender's; death: the reported rank's
  uint8_t token[kTokenBytes] = {};
};
static_assert(sizeof(Frame) == 32, "a frame is 32 bytes on the wire");

std::string describe(Cause cause, std::chrono::milliseconds heartbeat_timeout) {
  switch (cause) {
    case Cause::kClosed:
      return "died: its connection closed without a goodbye (killed, crashed, or exited without destroying "
             "its communicator)";
    case Cause::kSilent:
      return "went silent: no heartbeat for " + std::to_string(heartbeat_timeout.count()) +
             " ms (host down, network cut, or the process stopped; HIERCOLL_HEARTBEAT_TIMEOUT_MS)";
    case Cause::kAborted:
      return "gave up on the communicator (it aborted it, or failed to make it)";
    case Cause::kGarbled:
      return "sent the peer watch a malformed frame";
  }
  return "failed";
}

std::string rank_text(int rank, uint32_t pid) {
  return "rank " + std::to_string(rank) + (pid != 0 ? " (pid " + std::to_string(pid) + ")" : "");
}

std::string hex(const uint8_t* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    text += digits[bytes[i] >> 4];
    text += digits[bytes[i] & 15];
  }
  return text;
}

bool unhex(const std::string& text, uint8_t* bytes, size_t n) {
  if (text.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    int value = 0;
    for (char c : text.substr(2 * i, 2)) {
      int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
      if (digit < 0) return false;
      value = value * 16 + digit;
    }
    bytes[i] = static_cast<uint8_t>(value);
  }
  return true;
}

// This host's IPv4 addresses (each interface's first, topo::net_interfaces), `preferred`'s interface first, then the
// others, loopback last.
std::vector<std::string> host_addresses(const std::string& preferred) {
  std::vector<std::pair<int, std::string>> ranked;
  for (const topo::NetInterface& i : topo::net_interfaces()) {
    if (i.ipv4.empty()) continue;
    ranked.emplace_back(!preferred.empty() && preferred == i.name ? 0 : i.loopback ? 2 : 1, i.ipv4);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> addresses;
  for (auto& entry : ranked) {
    if (std::find(addresses.begin(), addresses.end(), entry.second) == addresses.end()) addresses.push_back(entry.second);
  }
  if (addresses.empty()) addresses.push_back("127.0.0.1");
  return addresses;
}

// Sends one frame without blocking. False if the socket would not take all of it: the peer has not read for a
// hundred heartbeats, or is gone; either way the connection is over.
bool send_frame(int fd, const Frame& frame) {
  ssize_t n;
  do {
    n = ::send(fd, &frame, sizeof frame, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof frame);
}

}  // namespace

class PeerWatch::Impl {
 public:
  Impl(const Options& options, OnFailure on_failure) : options_(options), on_failure_(std::move(on_failure)) {
    wake_ = base::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_.valid()) throw SystemError(std::string("peer watch: eventfd: ") + std::strerror(errno));
    epoll_ = base::UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) throw SystemError(std::string("peer watch: epoll_create1: ") + std::strerror(errno));
    watch_fd(wake_.get(), kWakeKey, EPOLL_CTL_ADD);
    heartbeat_every_ = kHeartbeatEvery;
    if (options_.heartbeat_timeout.count() > 0) {
      heartbeat_every_ = std::max(std::chrono::milliseconds(1), std::min(kHeartbeatEvery, options_.heartbeat_timeout / 4));
    }
    peers_.resize(static_cast<size_t>(options_.size));
  }
  ~Impl() { leave(false); }

  void start_hub() {
    if (getrandom(token_, sizeof token_, 0) != static_cast<ssize_t>(sizeof token_)) {
      throw SystemError(std::string("peer watch: getrandom: ") + std::strerror(errno));
    }
    listener_ = Socket::listen_on("0.0.0.0", 0);
    spare_ = Socket::spare_descriptor();
    set_nonblocking(listener_.fd());
    watch_fd(listener_.fd(), kListenerKey, EPOLL_CTL_ADD);
    std::string addresses;
    for (const auto& address : host_addresses(options_.socket_ifname)) {
      base::append_listed(addresses, address, ",");
    }
    contact_ = hex(token_, sizeof token_) + " " + std::to_string(listener_.local_port()) + " " + addresses;
    thread_ = std::thread([this] { run(); });
  }

  void start_spoke(const std::string& contact, bool same_host) {
    std::istringstream in(contact);
    std::string token, list;
    int port = 0;
    in >> token >> port >> list;
    if (!unhex(token, token_, sizeof token_) || port < 1 || port > 65535 || list.empty()) {
      throw InvalidUsageError("peer watch: rank 0's contact '" + contact + "' is malformed");
    }
    std::vector<std::string> addresses;
    std::stringstream split(list);
    for (std::string address; std::getline(split, address, ',');) addresses.push_back(address);
    if (same_host) {
      auto loopback = std::find(addresses.begin(), addresses.end(), "127.0.0.1");
      if (loopback != addresses.end()) std::rotate(addresses.begin(), loopback, loopback + 1);
    }
    // A burst of thousands of ranks can overflow the hub's accept queue (a connect that times out) or meet it out
    // of room (a connection closed before its welcome): those are tried again, backing off, until the deadline.
    // Refused everywhere means nobody listens (rank 0 died): that fails at once.
    const auto deadline = Clock::now() + options_.connect_timeout;
    std::string tried;
    base::Backoff<std::chrono::milliseconds> backoff(std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    for (bool again = true; again;) {
      again = false;
      for (const auto& address : addresses) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        auto limit = std::min(left, std::chrono::milliseconds(2000));
        if (limit.count() <= 0) break;
        if (tried.find(address) == std::string::npos) base::append_listed(tried, address);
        Socket sock = Socket::connect_within(address, static_cast<uint16_t>(port), limit);
        if (!sock.valid()) {
          again = again || errno == ETIMEDOUT;
          continue;
        }
        Frame hello = frame(Type::kHello);
        hello.rank = options_.rank;
        hello.pid = static_cast<uint32_t>(getpid());
        // The hub's welcome proves it is the communicator's (it knows the token), not another service on that port.
        Frame welcome;
        if (!send_frame(sock.fd(), hello) || !read_frame_within(sock.fd(), welcome, Clock::now() + limit) ||
            !genuine(welcome) || welcome.type != Type::kWelcome) {
          again = true;
          continue;
        }
        Peer& hub = peers_[0];
        hub.sock = std::move(sock);
        hub.rank = 0;
        hub.pid = welcome.pid;
        hub.heard = Clock::now();
        watch_fd(hub.sock.fd(), kPeerKey | 0, EPOLL_CTL_ADD);
        thread_ = std::thread([this] { run(); });
        return;
      }
      if (!again || Clock::now() + backoff.upcoming() >= deadline) break;
      backoff.pause();
    }
    throw RemoteError("rank " + std::to_string(options_.rank) + " cannot reach rank 0's peer watch (tried " + tried +
                      " port " + std::to_string(port) +
                      "): rank 0 died, or none of its addresses is routable from here (HIERCOLL_SOCKET_IFNAME)");
  }

  void leave(bool aborted) {
    if (!thread_.joinable()) return;
    leaving_aborted_ = aborted;
    leaving_ = true;
    uint64_t one = 1;
    if (::write(wake_.get(), &one, sizeof one) < 0) { /* the thread polls the flag at least every heartbeat */
    }
    thread_.join();
  }

  const std::string& contact() const { return contact_; }

 private:
  struct Peer {
    Socket sock;
    int rank = -1;  // -1: a connection that has not said hello yet (hub)
    uint32_t pid = 0;
    Clock::time_point heard;     // last frame from it
    Clock::time_point deadline;  // strangers: hello by then
    Frame in;
    size_t have = 0;  // bytes of `in` received
    uint64_t stranger_id = 0;  // hub: its key in strangers_ while it is one
  };

  // What an epoll event is about: its data is a key, the kind in the top bits and the rank or stranger id below, so
  // that an event for a connection closed earlier in the same batch finds nothing rather than freed memory.
  static constexpr uint64_t kWakeKey = 1ull << 62, kListenerKey = 2ull << 62, kPeerKey = 3ull << 62, kStrangerKey = 0,
                            kKindMask = 3ull << 62;

  void watch_fd(int fd, uint64_t key, int op) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = key;
    if (::epoll_ctl(epoll_.get(), op, fd, &event) != 0) {
      throw SystemError(std::string("peer watch: epoll_ctl: ") + std::strerror(errno));
    }
  }

  static void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

  Frame frame(Type type) const {
    Frame f;
    f.type = type;
    std::memcpy(f.token, token_, sizeof token_);
    return f;
  }
  bool genuine(const Frame& f) const {
    return f.magic == kMagic && std::memcmp(f.token, token_, sizeof token_) == 0;
  }

  static bool read_frame_within(int fd, Frame& f, Clock::time_point deadline) {
    size_t have = 0;
    auto* bytes = reinterpret_cast<uint8_t*>(&f);
    while (have < sizeof f) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd pfd{fd, POLLIN, 0};
      int rc = ::poll(&pfd, 1, static_cast<int>(left));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) return false;
      ssize_t n = ::recv(fd, bytes + have, sizeof f - have, MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return false;
      }
      have += static_cast<size_t>(n);
    }
    return true;
  }

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      // Never silently: a watch that stops watching would turn the next death back into a timeout.
      HIERCOLL_LOG(kWarn, "peer watch stopped: " << e.what() << "; a dead rank is noticed at the timeout instead");
    }
  }

  // One thread serves every connection. epoll rather than poll: the hub holds one connection per rank, and a scan of
  // them all at each heartbeat that arrives would cost it O(ranks^2) a second (docs/scaling.md, the peer watch at
  // 2,048 ranks).
  void loop() {
    auto next_beat = Clock::now();
    epoll_event events[64];
    for (;;) {
      const auto now = Clock::now();
      if (leaving_) return say_goodbye();
      if (now >= next_beat) {
        // What arrived while this thread was away (a loaded host can hold it off a core for seconds) counts before
        // any rank is judged silent: its frames are in the socket, it was not.
        drain(events);
        beat(Clock::now());
        next_beat = now + heartbeat_every_;
      }
      if (report_ && !reported_ && now >= report_->due) {
        reported_ = true;
        on_failure_(report_->loss);
      }
      auto wake_at = next_beat;
      if (report_ && !reported_) wake_at = std::min(wake_at, report_->due);
      // Strangers are kept in arrival order, so the first is the first whose time to say hello runs out.
      if (!strangers_.empty()) wake_at = std::min(wake_at, strangers_.begin()->second.deadline);
      const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - Clock::now()).count() + 1;
      const int ready = ::epoll_wait(epoll_.get(), events, 64, static_cast<int>(std::max<int64_t>(0, wait_ms)));
      if (ready < 0 && errno != EINTR) throw SystemError(std::string("peer watch: epoll_wait: ") + std::strerror(errno));
      for (int i = 0; i < ready; ++i) dispatch(events[i].data.u64);
    }
  }

  // Handles everything readable now, without waiting.
  void drain(epoll_event (&events)[64]) {
    for (;;) {
      const int ready = ::epoll_wait(epoll_.get(), events, 64, 0);
      for (int i = 0; i < ready; ++i) dispatch(events[i].data.u64);
      if (ready < 64) return;
    }
  }

  void dispatch(uint64_t key) {
    const uint64_t index = key & ~kKindMask;
    switch (key & kKindMask) {
      case kWakeKey: {
        uint64_t value;
        while (::read(wake_.get(), &value, sizeof value) > 0) {
        }
        return;
      }
      case kListenerKey:
        return accept_strangers();
      case kPeerKey: {
        // An earlier event's loss may have closed this connection (the hub drops a rank it cannot tell).
        Peer& peer = peers_[static_cast<size_t>(index)];
        if (peer.sock.valid()) receive(peer);
        return;
      }
      default: {
        auto stranger = strangers_.find(index);
        if (stranger != strangers_.end()) receive(stranger->second);
        return;
      }
    }
  }

  // Heartbeats out; strangers and silent ranks dropped.
  void beat(Clock::time_point now) {
    for (auto& peer : peers_) {
      if (!peer.sock.valid()) continue;
      if (options_.heartbeat_timeout.count() > 0 && now - peer.heard > options_.heartbeat_timeout) {
        lost(peer, Cause::kSilent);
      } else if (!send_frame(peer.sock.fd(), frame(Type::kHeartbeat))) {
        lost(peer, Cause::kSilent);
      }
    }
    while (!strangers_.empty() && now >= strangers_.begin()->second.deadline) {  // arrival order: the oldest first
      HIERCOLL_LOG(kWarn, "peer watch: dropped a connection that did not introduce itself within "
                              << kHelloWithin.count() << " ms");
      strangers_.erase(strangers_.begin());
    }
  }

  void accept_strangers() {
    for (;;) {
      // Invalid: nothing more (EAGAIN), or one shed for want of descriptors; the next poll goes on.
      Socket sock = Socket::accept_from(listener_, SOCK_CLOEXEC | SOCK_NONBLOCK, spare_);
      if (!sock.valid()) return;
      // Room for every rank of a burst (the store releases them together), and a few strangers beside them.
      const size_t most = static_cast<size_t>(options_.size) + kMaxStrangers;
      if (strangers_.size() >= most) {
        HIERCOLL_LOG(kWarn, "peer watch: refused a connection: " << most
                                                                 << " others have not introduced themselves yet");
        continue;
      }
      const uint64_t id = next_stranger_id_++;
      watch_fd(sock.fd(), kStrangerKey | id, EPOLL_CTL_ADD);
      Peer& stranger = strangers_[id];
      stranger.sock = std::move(sock);
      stranger.deadline = Clock::now() + kHelloWithin;
      stranger.stranger_id = id;
    }
  }

  // Reads what `peer` sent and acts on each whole frame.
  void receive(Peer& peer) {
    auto* bytes = reinterpret_cast<uint8_t*>(&peer.in);
    for (;;) {
      ssize_t n = ::recv(peer.sock.fd(), bytes + peer.have, sizeof(Frame) - peer.have, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return closed(peer);
      peer.have += static_cast<size_t>(n);
      if (peer.have < sizeof(Frame)) continue;
      peer.have = 0;
      if (!handle(peer, peer.in)) return;
    }
  }

  // False once `peer`'s connection is gone.
  bool handle(Peer& peer, const Frame& f) {
    if (peer.rank < 0) return introduce(peer, f);
    if (!genuine(f)) {
      lost(peer, Cause::kGarbled);
      return false;
    }
    peer.heard = Clock::now();
    switch (f.type) {
      case Type::kHeartbeat:
        return true;
      case Type::kBye:
        HIERCOLL_LOG(kInfo, "peer watch: " << rank_text(peer.rank, peer.pid) << " left");
        peer.sock.close();
        return false;
      case Type::kAbort:
        lost(peer, Cause::kAborted);
        return false;
      case Type::kDeath:
        if (is_hub() || f.rank < 0 || f.rank >= options_.size) {
          lost(peer, Cause::kGarbled);
          return false;
        }
        report(f.rank, f.pid, f.cause);
        return true;
      default:
        lost(peer, Cause::kGarbled);
        return false;
    }
  }

  // The hub, a stranger's first frame: a rank of this communicator, with its token, not yet connected.
  bool introduce(Peer& stranger, const Frame& f) {
    std::string why;
    if (!genuine(f) || f.type != Type::kHello) {
      why = "it is not a rank of this communicator (wrong magic or token)";
    } else if (f.rank < 1 || f.rank >= options_.size) {
      why = "rank " + std::to_string(f.rank) + " is outside 1.." + std::to_string(options_.size - 1);
    } else if (peers_[static_cast<size_t>(f.rank)].rank >= 0) {  // set at its hello, kept after it is gone
      why = "rank " + std::to_string(f.rank) + " is connected already";
    }
    const uint64_t id = stranger.stranger_id;
    if (!why.empty()) {
      HIERCOLL_LOG(kWarn, "peer watch: dropped a connection: " << why);
      strangers_.erase(id);
      return false;
    }
    Frame welcome = frame(Type::kWelcome);
    welcome.pid = static_cast<uint32_t>(getpid());
    Peer& peer = peers_[static_cast<size_t>(f.rank)];
    peer.sock = std::move(stranger.sock);
    peer.rank = f.rank;
    peer.pid = f.pid;
    peer.heard = Clock::now();
    watch_fd(peer.sock.fd(), kPeerKey | static_cast<uint64_t>(f.rank), EPOLL_CTL_MOD);
    strangers_.erase(id);
    if (!send_frame(peer.sock.fd(), welcome)) {
      lost(peer, Cause::kClosed);
      return false;
    }
    // A rank that connects late (still in start-up) hears of the loss relayed before it, or it would wait for it.
    if (relayed_) {
      if (!send_frame(peer.sock.fd(), *relayed_)) {
        lost(peer, Cause::kSilent);
        return false;
      }
    }
    return false;  // `stranger` is gone; the rank's next frames arrive on its own entry
  }

  void closed(Peer& peer) {
    if (peer.rank < 0) {  // a stranger hung up: nothing to report
      strangers_.erase(peer.stranger_id);
      return;
    }
    lost(peer, Cause::kClosed);
  }

  // `peer`'s connection is over without a goodbye: the hub tells everyone; a spoke has lost rank 0. Only the first
  // loss is relayed: it breaks the communicator on every rank, and each survivor then aborts in turn, which relayed
  // too would cost the hub a frame per pair of ranks (4 million at 2,048) just when the job should end quickly.
  void lost(Peer& peer, Cause cause) {
    peer.sock.close();
    report(peer.rank, peer.pid, cause);
    if (!is_hub() || relayed_) return;
    Frame death = frame(Type::kDeath);
    death.rank = peer.rank;
    death.pid = peer.pid;
    death.cause = cause;
    relayed_ = death;
    std::vector<Peer*> unreachable;
    for (auto& other : peers_) {
      if (other.sock.valid() && !send_frame(other.sock.fd(), death)) unreachable.push_back(&other);
    }
    for (Peer* other : unreachable) {
      if (other->sock.valid()) lost(*other, Cause::kSilent);  // each is closed before it relays: this ends
    }
  }

  void report(int rank, uint32_t pid, Cause cause) {
    const std::string reason = rank_text(rank, pid) + " " + describe(cause, options_.heartbeat_timeout);
    HIERCOLL_LOG(kWarn, "peer watch: " << reason);
    const bool connection_closed = cause == Cause::kClosed || cause == Cause::kAborted;
    if (!report_) report_ = Report{{rank, connection_closed, cause == Cause::kAborted, reason}, Clock::now() + kReportGrace};
  }

  void say_goodbye() {
    const Frame bye = frame(leaving_aborted_ ? Type::kAbort : Type::kBye);
    for (auto& peer : peers_) {
      if (peer.sock.valid()) send_frame(peer.sock.fd(), bye);
      peer.sock.close();
    }
    strangers_.clear();
    listener_.close();
  }

  bool is_hub() const { return options_.rank == 0; }

  struct Report {
    Loss loss;
    Clock::time_point due;
  };

  const Options options_;
  const OnFailure on_failure_;
  uint8_t token_[kTokenBytes] = {};
  std::string contact_;
  base::UniqueFd wake_;  // eventfd: leave() wakes the thread
  Socket listener_;
  base::UniqueFd spare_;  // hub: given up to shed a connection when out of descriptors (Socket::accept_from)
  std::vector<Peer> peers_;  // by rank: the hub's spokes; a spoke's hub at [0]
  base::UniqueFd epoll_;     // every connection, the listener and wake_
  std::map<uint64_t, Peer> strangers_;  // hub: connections that have not said hello, by arrival
  uint64_t next_stranger_id_ = 0;
  std::optional<Frame> relayed_;  // the hub: the loss it relayed (the first), for ranks that connect later
  std::chrono::milliseconds heartbeat_every_;
  std::optional<Report> report_;
  bool reported_ = false;
  std::atomic<bool> leaving_{false};
  std::atomic<bool> leaving_aborted_{false};
  std::thread thread_;
};

PeerWatch::PeerWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PeerWatch::~PeerWatch() = default;

std::unique_ptr<PeerWatch> PeerWatch::hub(const Options& options, OnFailure on_failure) {
  auto impl = std::make_unique<Impl>(options, std::move(on_failure));
  impl->start_hub();
  return std::unique_ptr<PeerWatch>(new PeerWatch(std::move(impl)));
}

std::unique_ptr<PeerWatch> PeerWatch::spoke(const Options& options, const std::string& contact, bool same_host,
                                            OnFailure on_failure) {
  auto impl = std::make_unique<Impl>(options, std::move(on_failure));
  impl->start_spoke(contact, same_host);
  return std::unique_ptr<PeerWatch>(new PeerWatch(std::move(impl)));
}

void PeerWatch::leave(bool aborted) { impl_->leave(aborted); }
const std::string& PeerWatch::contact() const { return impl_->contact(); }

}  // namespace hiercoll::watch
