// TcpStore: one server thread multiplexes every client with poll(); a GET of a missing key is parked
// until some SET provides it, so waiting clients cost nothing on the server.
//
// Wire format, both directions little-endian:
//   request: u8 command, u32 key length, key, u64 value length, value
//   reply:   SET -> u8 1;  GET -> u64 length, value;  ADD -> i64 new value;  CHECK -> u8 0|1;  HELLO -> u8 1
// A server with a job token admits a client once its first request is HELLO with that token as the value.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/backoff.hpp"
#include "base/limits.hpp"
#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/store.hpp"
#include "store/socket.hpp"

namespace hiercoll {
namespace {

using store::Clock;
using store::Socket;

// kGetWithin: kGet whose value is a u64 of milliseconds; the server answers with the key's value once it is set,
// or with kAbsent in place of a length once that time has passed (the connection stays usable).
enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kHello = 5, kGetWithin = 6 };
constexpr uint64_t kAbsent = ~uint64_t{0};

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t get_u32(const uint8_t* p) { return static_cast<uint32_t>(get_u64(p) & 0xffffffffu); }

// What one client can make the server hold. Real keys and values are a few hundred bytes (addresses, counters,
// torch's rendezvous); a frame beyond these limits is corrupt or hostile and drops that client, never the server.
constexpr uint64_t kMaxKeyBytes = 64u << 10;
constexpr uint64_t kMaxValueBytes = 64u << 20;
constexpr size_t kMaxUnreadReplyBytes = 256u << 20;  // replies a client has not read yet
constexpr size_t kHeaderBytes = 13;                  // u8 command, u32 key length, u64 value length

std::vector<uint8_t> encode_request(Command cmd, const std::string& key, const Store::Bytes& value) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) {
    throw InvalidUsageError("store: key of " + std::to_string(key.size()) + " bytes, value of " +
                            std::to_string(value.size()) + " bytes: the TCP store takes keys up to " +
                            std::to_string(kMaxKeyBytes) + " and values up to " + std::to_string(kMaxValueBytes));
  }
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + key.size() + value.size());
  out.push_back(cmd);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(key.size() >> (8 * i)));
  out.insert(out.end(), key.begin(), key.end());
  put_u64(out, value.size());
  out.insert(out.end(), value.begin(), value.end());
  return out;
}

class StoreServer {
 public:
  StoreServer(Socket listener, std::string job_token) : listener_(std::move(listener)), token_(std::move(job_token)) {
    if (!wake_.valid()) throw SystemError(std::string("store: eventfd failed: ") + std::strerror(errno));
    thread_ = std::thread([this] { run(); });
  }
  ~StoreServer() {
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
  uint16_t port() const { return listener_.local_port(); }
  uint64_t requests_served() const { return served_.load(std::memory_order_relaxed); }

 private:
  struct Client {
    Socket socket;
    std::vector<uint8_t> input;
    std::vector<uint8_t> output;  // replies not yet taken by the client: the server never blocks on a send
    std::string broken;           // why it is to be dropped, once the current round of events is over
    bool admitted = false;        // presented the job token (or the server has none)
  };

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_.get(), POLLIN, 0});
      fds.push_back({listener_.fd(), POLLIN, 0});
      for (auto& [fd, client] : clients_) {
        fds.push_back({fd, static_cast<short>(POLLIN | (client.output.empty() ? 0 : POLLOUT)), 0});
      }
      if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0) continue;
      if (fds[0].revents) return;
      expire_waiters();
      if (fds[1].revents & POLLIN) {
        Socket accepted = Socket::accept_from(listener_, SOCK_CLOEXEC, spare_);
        if (accepted.valid()) {
          const int fd = accepted.fd();
          Client& client = clients_[fd];
          client.socket = std::move(accepted);
          client.admitted = token_.empty();
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Client& client = clients_[fds[i].fd];
        // Whatever a client sends ends with that client: nothing it can send may end the server thread.
        try {
          if (fds[i].revents & POLLOUT) flush(client);
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) serve(client);
        } catch (const std::exception& e) {
          client.broken = e.what();
        }
      }
      for (auto it = clients_.begin(); it != clients_.end();) {
        if (it->second.broken.empty()) {
          ++it;
          continue;
        }
        if (it->second.broken != "closed") {
          HIERCOLL_LOG(kWarn, "store: dropped a client: " << it->second.broken);
        }
        forget_waiter(it->first);
        it = clients_.erase(it);
      }
    }
  }

  void forget_waiter(int fd) {
    for (auto& [key, waiters] : waiting_) {
      for (auto it = waiters.begin(); it != waiters.end();) it = (it->fd == fd) ? waiters.erase(it) : it + 1;
    }
  }

  // Until the first timed read runs out (-1: none waits with a limit).
  int poll_timeout_ms() const {
    std::optional<Clock::time_point> first;
    for (const auto& [key, waiters] : waiting_) {
      for (const Waiter& w : waiters) {
        if (w.timed && (!first || w.deadline < *first)) first = w.deadline;
      }
    }
    if (!first) return -1;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*first - Clock::now()).count() + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 60000));
  }

  // Timed reads whose time is up are answered kAbsent.
  void expire_waiters() {
    const auto now = Clock::now();
    for (auto entry = waiting_.begin(); entry != waiting_.end();) {
      auto& waiters = entry->second;
      for (auto it = waiters.begin(); it != waiters.end();) {
        if (!it->timed || it->deadline > now) {
          ++it;
          continue;
        }
        auto c = clients_.find(it->fd);
        if (c != clients_.end()) {
          std::vector<uint8_t> absent;
          put_u64(absent, kAbsent);
          send(c->second, absent.data(), absent.size());
        }
        it = waiters.erase(it);
      }
      entry = waiters.empty() ? waiting_.erase(entry) : std::next(entry);
    }
  }

  // Reads what arrived from one client and answers every complete request.
  void serve(Client& client) {
    uint8_t buffer[65536];
    ssize_t n = ::recv(client.socket.fd(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      client.broken = "closed";
      return;
    }
    if (n < 0) return;
    auto& in = client.input;
    in.insert(in.end(), buffer, buffer + n);
    size_t used = 0;
    while (in.size() - used >= kHeaderBytes) {
      const uint8_t* p = in.data() + used;
      const uint64_t key_len = get_u32(p + 1);
      if (key_len > kMaxKeyBytes) {
        throw InvalidUsageError("store: a key of " + std::to_string(key_len) + " bytes (at most " +
                                std::to_string(kMaxKeyBytes) + ")");
      }
      if (in.size() - used < kHeaderBytes + key_len) break;
      const uint64_t value_len = get_u64(p + 5 + key_len);
      if (value_len > kMaxValueBytes) {
        throw InvalidUsageError("store: a value of " + std::to_string(value_len) + " bytes (at most " +
                                std::to_string(kMaxValueBytes) + ")");
      }
      const size_t total = kHeaderBytes + key_len + value_len;  // both bounded above: no overflow
      if (in.size() - used < total) break;
      std::string key(reinterpret_cast<const char*>(p + 5), key_len);
      Store::Bytes value(p + kHeaderBytes + key_len, p + total);
      used += total;
      handle(client, p[0], key, std::move(value));
    }
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
  }

  // Queues `bytes` for the client and sends what its socket takes now; the rest goes when poll says it can.
  void send(Client& client, const uint8_t* bytes, size_t size) {
    client.output.insert(client.output.end(), bytes, bytes + size);
    if (client.output.size() > kMaxUnreadReplyBytes) {
      client.broken = "it left " + std::to_string(client.output.size()) + " bytes of replies unread";
      return;
    }
    flush(client);
  }

  void flush(Client& client) {
    size_t sent = 0;
    while (sent < client.output.size()) {
      ssize_t n = ::send(client.socket.fd(), client.output.data() + sent, client.output.size() - sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) {
        client.broken = "closed";
        break;
      }
      sent += static_cast<size_t>(n);
    }
    client.output.erase(client.output.begin(), client.output.begin() + static_cast<std::ptrdiff_t>(sent));
  }

  void reply_value(Client& client, const Store::Bytes& value) {
    std::vector<uint8_t> out;
    put_u64(out, value.size());
    out.insert(out.end(), value.begin(), value.end());
    send(client, out.data(), out.size());
  }

  void handle(Client& client, uint8_t command, const std::string& key, Store::Bytes value) {
    served_.fetch_add(1, std::memory_order_relaxed);
    if (command == kHello) {
      if (!token_.empty() && std::string(value.begin(), value.end()) != token_) {
        throw InvalidUsageError("store: a client presented another job's token");
      }
      client.admitted = true;
      uint8_t ack = 1;
      send(client, &ack, 1);
      return;
    }
    if (!client.admitted) {
      throw InvalidUsageError("store: a client did not present this job's token (HIERCOLL_JOB_TOKEN) first");
    }
    switch (command) {
      case kSet: {
        data_[key] = std::move(value);
        uint8_t ack = 1;
        send(client, &ack, 1);
        auto it = waiting_.find(key);
        if (it != waiting_.end()) {
          for (const Waiter& w : it->second) {
            auto c = clients_.find(w.fd);
            if (c != clients_.end()) reply_value(c->second, data_[key]);
          }
          waiting_.erase(it);
        }
        break;
      }
      case kGet:
      case kGetWithin: {
        Waiter waiter{client.socket.fd(), false, {}};
        if (command == kGetWithin) {
          if (value.size() != 8) {
            throw InvalidUsageError("store: GET_WITHIN with a value of " + std::to_string(value.size()) +
                                    " bytes, not 8");
          }
          waiter.timed = true;
          const uint64_t ms = std::min<uint64_t>(get_u64(value.data()), 24ull * 3600 * 1000);
          waiter.deadline = Clock::now() + std::chrono::milliseconds(ms);
        }
        auto it = data_.find(key);
        if (it == data_.end()) {
          waiting_[key].push_back(waiter);
        } else {
          reply_value(client, it->second);
        }
        break;
      }
      case kAdd: {
        if (value.size() != 8) {
          throw InvalidUsageError("store: ADD with a value of " + std::to_string(value.size()) + " bytes, not 8");
        }
        int64_t delta = static_cast<int64_t>(get_u64(value.data()));
        auto& stored = data_[key];
        int64_t current = stored.size() == 8 ? static_cast<int64_t>(get_u64(stored.data())) : 0;
        current = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));  // wraps
        stored.clear();
        put_u64(stored, static_cast<uint64_t>(current));
        send(client, stored.data(), 8);
        break;
      }
      case kCheck: {
        uint8_t present = data_.count(key) ? 1 : 0;
        send(client, &present, 1);
        break;
      }
      default: throw InvalidUsageError("store: unknown command " + std::to_string(command));
    }
  }

  std::atomic<uint64_t> served_{0};  // requests handled (server thread writes, any thread reads)
  Socket listener_;
  base::UniqueFd spare_ = Socket::spare_descriptor();  // given up to shed a connection when out of descriptors
  const std::string token_;
  base::UniqueFd wake_{eventfd(0, EFD_CLOEXEC)};  // the destructor wakes the server's thread
  std::thread thread_;
  std::map<int, Client> clients_;
  std::unordered_map<std::string, Store::Bytes> data_;
  struct Waiter {
    int fd;
    bool timed;                 // kGetWithin: answered kAbsent at `deadline`
    Clock::time_point deadline;
  };
  std::unordered_map<std::string, std::vector<Waiter>> waiting_;  // reads held until their key is set
};

}  // namespace

struct TcpStore::Impl {
  std::unique_ptr<StoreServer> server;
  std::string host;
  uint16_t port = 0;
  std::string token;
  std::mutex mutex;  // one request at a time on the connection
  Socket connection;

  void connect(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    base::Backoff<std::chrono::milliseconds> backoff(std::chrono::milliseconds(5), std::chrono::milliseconds(200));
    for (;;) {
      connection = Socket::try_connect(host, port);
      if (connection.valid()) return introduce(deadline);
      if (Clock::now() >= deadline) {
        throw TimeoutError("store: no store server at " + host + ":" + std::to_string(port) + " after " +
                           std::to_string(timeout.count()) + " ms (is rank 0 running, and the address right?)");
      }
      backoff.pause();
    }
  }

  // Presents the job token, if there is one: a server of another job (or one with another token) hangs up.
  void introduce(Clock::time_point deadline) {
    if (token.empty()) return;
    auto hello = encode_request(kHello, {}, Store::Bytes(token.begin(), token.end()));
    uint8_t ack = 0;
    try {
      connection.send_all(hello.data(), hello.size());
      connection.recv_all(&ack, 1, std::max(deadline, Clock::now() + std::chrono::seconds(5)));
    } catch (const SystemError&) {
      connection.close();
      throw InvalidUsageError("store: the server at " + host + ":" + std::to_string(port) +
                              " refused this job's token (HIERCOLL_JOB_TOKEN): it serves another job");
    }
  }

  // One request/reply. A timeout leaves a reply in flight, so the connection is replaced.
  template <typename ReadReply>
  auto request(Command cmd, const std::string& key, const Store::Bytes& value, std::chrono::milliseconds timeout,
               ReadReply read_reply) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!connection.valid()) connect(timeout);
    auto message = encode_request(cmd, key, value);
    try {
      connection.send_all(message.data(), message.size());
      return read_reply(Clock::now() + timeout);
    } catch (const TimeoutError&) {
      connection.close();
      throw;
    }
  }
};

TcpStore::TcpStore(const std::string& host, uint16_t port, bool is_server, std::chrono::milliseconds timeout,
                   const std::string& job_token)
    : impl_(std::make_unique<Impl>()) {
  timeout_ = timeout;
  impl_->host = host;
  impl_->port = port;
  impl_->token = job_token;
  if (is_server) {
    base::raise_descriptor_limit();  // a client socket per rank of the job: past the usual 1,024 at about 1,000 ranks
    impl_->server = std::make_unique<StoreServer>(Socket::listen_on(host, port), job_token);
    impl_->port = impl_->server->port();
  }
  impl_->connect(timeout);
}

TcpStore::~TcpStore() = default;

uint16_t TcpStore::port() const { return impl_->port; }

void TcpStore::set(const std::string& key, const Bytes& value) {
  impl_->request(kSet, key, value, timeout_, [&](Clock::time_point deadline) {
    uint8_t ack;
    impl_->connection.recv_all(&ack, 1, deadline);
    return ack;
  });
}

Store::Bytes TcpStore::get(const std::string& key) { return get_within(key, timeout_); }

uint64_t TcpStore::requests_served() const { return impl_->server ? impl_->server->requests_served() : 0; }

// The server holds the read until the key is set or `timeout` has passed, and says which: one request however long
// the wait, and the connection stays. The client's own limit, a little later, covers a server that never answers
// (then the connection is replaced).
Store::Bytes TcpStore::get_within(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string late = "store: key '" + key + "' did not appear within " + std::to_string(timeout.count()) + " ms";
  Bytes limit;
  put_u64(limit, static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
  std::optional<Bytes> value;
  try {
    value = impl_->request(kGetWithin, key, limit, timeout + std::chrono::seconds(5),
                           [&](Clock::time_point deadline) -> std::optional<Bytes> {
                             uint8_t header[8];
                             impl_->connection.recv_all(header, 8, deadline);
                             const uint64_t length = get_u64(header);
                             if (length == kAbsent) return std::nullopt;
                             Bytes bytes(length);
                             impl_->connection.recv_all(bytes.data(), bytes.size(), deadline);
                             return bytes;
                           });
  } catch (const TimeoutError&) {
    throw TimeoutError(late);
  }
  if (!value) throw TimeoutError(late);
  return std::move(*value);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Bytes value;
  put_u64(value, static_cast<uint64_t>(delta));
  return impl_->request(kAdd, key, value, timeout_, [&](Clock::time_point deadline) {
    uint8_t reply[8];
    impl_->connection.recv_all(reply, 8, deadline);
    return static_cast<int64_t>(get_u64(reply));
  });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    bool present = impl_->request(kCheck, key, {}, timeout_, [&](Clock::time_point deadline) {
      uint8_t reply;
      impl_->connection.recv_all(&reply, 1, deadline);
      return reply != 0;
    });
    if (!present) return false;
  }
  return true;
}

}  // namespace hiercoll
