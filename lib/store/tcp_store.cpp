// TcpStore: one server thread multiplexes every client with poll(); a GET of a missing key is parked
// until some SET provides it, so waiting clients cost nothing on the server.
//
// Wire format, both directions little-endian:
//   request: u8 command, u32 key length, key, u64 value length, value
//   reply:   SET -> u8 1;  GET -> u64 length, value;  ADD -> i64 new value;  CHECK -> u8 0|1
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "hiercoll/errors.hpp"
#include "hiercoll/store.hpp"
#include "store/socket.hpp"

namespace hiercoll {
namespace {

using store::Clock;
using store::Socket;

enum Command : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t get_u32(const uint8_t* p) { return static_cast<uint32_t>(get_u64(p) & 0xffffffffu); }

std::vector<uint8_t> encode_request(Command cmd, const std::string& key, const Store::Bytes& value) {
  std::vector<uint8_t> out;
  out.reserve(13 + key.size() + value.size());
  out.push_back(cmd);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(key.size() >> (8 * i)));
  out.insert(out.end(), key.begin(), key.end());
  put_u64(out, value.size());
  out.insert(out.end(), value.begin(), value.end());
  return out;
}

class StoreServer {
 public:
  explicit StoreServer(Socket listener) : listener_(std::move(listener)) {
    if (pipe2(wake_, O_CLOEXEC) != 0) throw SystemError("store: pipe2 failed");
    thread_ = std::thread([this] { run(); });
  }
  ~StoreServer() {
    char byte = 0;
    (void)!write(wake_[1], &byte, 1);
    thread_.join();
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  uint16_t port() const { return listener_.local_port(); }

 private:
  struct Client {
    Socket socket;
    std::vector<uint8_t> input;
  };

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listener_.fd(), POLLIN, 0});
      for (auto& [fd, client] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) clients_[fd].socket = Socket(fd);
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!serve(fds[i].fd)) drop(fds[i].fd);
      }
    }
  }

  void drop(int fd) {
    for (auto& [key, waiters] : waiting_) {
      for (auto it = waiters.begin(); it != waiters.end();) it = (*it == fd) ? waiters.erase(it) : it + 1;
    }
    clients_.erase(fd);
  }

  // Reads what arrived from one client and answers every complete request. False: drop the client.
  bool serve(int fd) {
    Client& client = clients_[fd];
    uint8_t buffer[65536];
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) return n < 0 && (errno == EAGAIN || errno == EINTR);
    client.input.insert(client.input.end(), buffer, buffer + n);
    size_t used = 0;
    auto& in = client.input;
    while (in.size() - used >= 13) {
      const uint8_t* p = in.data() + used;
      uint32_t key_len = get_u32(p + 1);
      if (in.size() - used < 5 + key_len + 8) break;
      uint64_t value_len = get_u64(p + 5 + key_len);
      size_t total = 13 + key_len + value_len;
      if (in.size() - used < total) break;
      std::string key(reinterpret_cast<const char*>(p + 5), key_len);
      Store::Bytes value(p + 13 + key_len, p + total);
      used += total;
      try {
        handle(client, static_cast<Command>(p[0]), key, std::move(value));
      } catch (const Error&) {
        return false;
      }
    }
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
    return true;
  }

  void reply_value(Socket& socket, const Store::Bytes& value) {
    std::vector<uint8_t> out;
    put_u64(out, value.size());
    out.insert(out.end(), value.begin(), value.end());
    socket.send_all(out.data(), out.size());
  }

  void handle(Client& client, Command cmd, const std::string& key, Store::Bytes value) {
    switch (cmd) {
      case kSet: {
        data_[key] = std::move(value);
        uint8_t ack = 1;
        client.socket.send_all(&ack, 1);
        auto it = waiting_.find(key);
        if (it != waiting_.end()) {
          for (int fd : it->second) {
            auto c = clients_.find(fd);
            if (c != clients_.end()) reply_value(c->second.socket, data_[key]);
          }
          waiting_.erase(it);
        }
        break;
      }
      case kGet: {
        auto it = data_.find(key);
        if (it == data_.end()) {
          waiting_[key].push_back(client.socket.fd());
        } else {
          reply_value(client.socket, it->second);
        }
        break;
      }
      case kAdd: {
        int64_t delta = static_cast<int64_t>(get_u64(value.data()));
        auto& stored = data_[key];
        int64_t current = stored.size() == 8 ? static_cast<int64_t>(get_u64(stored.data())) : 0;
        current += delta;
        stored.clear();
        put_u64(stored, static_cast<uint64_t>(current));
        client.socket.send_all(stored.data(), 8);
        break;
      }
      case kCheck: {
        uint8_t present = data_.count(key) ? 1 : 0;
        client.socket.send_all(&present, 1);
        break;
      }
      default: throw InvalidUsageError("store: unknown command");
    }
  }

  Socket listener_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::map<int, Client> clients_;
  std::unordered_map<std::string, Store::Bytes> data_;
  std::unordered_map<std::string, std::vector<int>> waiting_;
};

}  // namespace

struct TcpStore::Impl {
  std::unique_ptr<StoreServer> server;
  std::string host;
  uint16_t port = 0;
  std::mutex mutex;  // one request at a time on the connection
  Socket connection;

  void connect(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      connection = Socket::try_connect(host, port);
      if (connection.valid()) return;
      if (Clock::now() >= deadline) {
        throw TimeoutError("store: no store server at " + host + ":" + std::to_string(port) + " after " +
                           std::to_string(timeout.count()) + " ms (is rank 0 running, and the address right?)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
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

TcpStore::TcpStore(const std::string& host, uint16_t port, bool is_server, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  timeout_ = timeout;
  impl_->host = host;
  impl_->port = port;
  if (is_server) {
    impl_->server = std::make_unique<StoreServer>(Socket::listen_on(host, port));
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

Store::Bytes TcpStore::get(const std::string& key) {
  try {
    return impl_->request(kGet, key, {}, timeout_, [&](Clock::time_point deadline) {
      uint8_t header[8];
      impl_->connection.recv_all(header, 8, deadline);
      Bytes value(get_u64(header));
      impl_->connection.recv_all(value.data(), value.size(), deadline);
      return value;
    });
  } catch (const TimeoutError&) {
    throw TimeoutError("store: key '" + key + "' did not appear within " + std::to_string(timeout_.count()) + " ms");
  }
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
