#include "transport/memory/memory_fabric.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <random>
#include <vector>

#include "hiercoll/errors.hpp"

namespace hiercoll::transport {

namespace {

using Clock = std::chrono::steady_clock;

struct MemoryRequest : Request {
  void* buffer = nullptr;  // receives: where the message goes
  Tag ignore = 0;          // receives: tag bits that need not match
};

struct Message {
  int source = -1;
  Tag tag = 0;
  std::vector<uint8_t> data;
  std::shared_ptr<MemoryRequest> send;  // completes when the message is delivered
  Clock::time_point due;
  uint64_t order = 0;  // sending order, to deliver messages due at the same time in that order
};

void complete(MemoryRequest& request, size_t bytes) {
  request.bytes_done = bytes;
  request.state.store(Request::State::kDone, std::memory_order_release);
}

void fail(MemoryRequest& request, const std::string& why) {
  if (request.done()) return;
  request.error = why;
  request.state.store(Request::State::kFailed, std::memory_order_release);
}

bool matches(const MemoryRequest& recv, const Message& message) {
  return (recv.peer < 0 || recv.peer == message.source) && ((recv.tag ^ message.tag) & ~recv.ignore) == 0;
}

// Copies a message into a matching receive and completes it; a message larger than the receive fails it (as
// libfabric reports truncation).
void receive_into(MemoryRequest& recv, const Message& message) {
  recv.source = message.source;
  if (message.data.size() > recv.bytes_posted) {
    fail(recv, "message of " + std::to_string(message.data.size()) + " bytes truncated to the " +
                   std::to_string(recv.bytes_posted) + " posted");
    return;
  }
  if (!message.data.empty()) std::memcpy(recv.buffer, message.data.data(), message.data.size());
  complete(recv, message.data.size());
}

// One rank's side of the fabric: messages on their way to it, those that arrived before their receive, its
// posted receives. Everything under `mutex`; `events` counts what a waiting owner should look at again.
struct Box {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Message> in_flight;
  std::list<Message> unexpected;
  std::list<std::shared_ptr<MemoryRequest>> receives;
  uint64_t events = 0;
  bool dead = false;
};

}  // namespace

struct MemoryFabric::State {
  State(int n, MemoryFaults f) : faults(f), boxes(static_cast<size_t>(n)), rng(f.seed),
        last_due(static_cast<size_t>(n) * static_cast<size_t>(n)) {}
  MemoryFaults faults;
  std::vector<Box> boxes;
  std::mutex rng_mutex;  // also guards last_due and next_order
  std::mt19937_64 rng;
  std::vector<Clock::time_point> last_due;  // [source * n + destination]: keeps a pair's order without reorder
  uint64_t next_order = 0;
  std::atomic<uint64_t> sent{0};

  int size() const { return static_cast<int>(boxes.size()); }
  Box& box(int rank) { return boxes[static_cast<size_t>(rank)]; }

  Clock::time_point due_time(int source, int destination, uint64_t& order) {
    std::lock_guard<std::mutex> lock(rng_mutex);
    order = next_order++;
    auto now = Clock::now();
    if (faults.max_delay.count() <= 0) return now;
    auto delay = std::chrono::microseconds(
        std::uniform_int_distribution<int64_t>(0, faults.max_delay.count())(rng));
    auto due = now + delay;
    auto& last = last_due[static_cast<size_t>(source) * boxes.size() + static_cast<size_t>(destination)];
    if (!faults.reorder) due = std::max(due, last);
    last = std::max(last, due);
    return due;
  }

  // Tells `rank`'s owner to look again (a send of its completed). Takes only that rank's lock.
  void wake(int rank) {
    Box& b = box(rank);
    {
      std::lock_guard<std::mutex> lock(b.mutex);
      ++b.events;
    }
    b.cv.notify_all();
  }

  // Delivers the due messages in `b` (locked by the caller): into a matching receive, else kept as
  // unexpected. Returns the senders to wake.
  std::vector<int> deliver_due(Box& b, Clock::time_point now) {
    std::vector<int> senders;
    auto due_end = std::stable_partition(b.in_flight.begin(), b.in_flight.end(),
                                         [now](const Message& m) { return m.due <= now; });
    std::vector<Message> due(std::make_move_iterator(b.in_flight.begin()), std::make_move_iterator(due_end));
    b.in_flight.erase(b.in_flight.begin(), due_end);
    std::sort(due.begin(), due.end(), [](const Message& x, const Message& y) {
      return x.due != y.due ? x.due < y.due : x.order < y.order;
    });
    for (Message& message : due) {
      auto it = std::find_if(b.receives.begin(), b.receives.end(),
                             [&](const std::shared_ptr<MemoryRequest>& r) { return matches(*r, message); });
      complete(*message.send, message.data.size());
      senders.push_back(message.source);
      if (it != b.receives.end()) {
        receive_into(**it, message);
        b.receives.erase(it);
      } else {
        message.send.reset();
        b.unexpected.push_back(std::move(message));
      }
      ++b.events;
    }
    return senders;
  }
};

namespace {

class MemoryEndpoint final : public Endpoint {
 public:
  MemoryEndpoint(std::shared_ptr<MemoryFabric::State> state, int rank) : state_(std::move(state)), rank_(rank) {}

  ~MemoryEndpoint() override { cancel_all("endpoint closed"); }

  std::string provider() const override { return "memory"; }

  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> bytes(sizeof rank_);
    std::memcpy(bytes.data(), &rank_, sizeof rank_);
    return bytes;
  }

  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    if (my_rank != rank_ || static_cast<int>(addresses.size()) != state_->size()) {
      throw InvalidUsageError("memory fabric: rank " + std::to_string(my_rank) + " of " +
                              std::to_string(addresses.size()) + " connected to the endpoint of rank " +
                              std::to_string(rank_) + " of " + std::to_string(state_->size()));
    }
    for (size_t r = 0; r < addresses.size(); ++r) {
      int published = -1;
      if (addresses[r].size() == sizeof published) std::memcpy(&published, addresses[r].data(), sizeof published);
      if (published != static_cast<int>(r)) {
        throw InvalidUsageError("memory fabric: rank " + std::to_string(r) + "'s address is not its own");
      }
    }
  }

  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override {
    auto request = make(true, peer, tag, bytes);
    check_peer(peer);
    if (dead()) {
      fail(*request, "rank " + std::to_string(rank_) + " is dead");
      return request;
    }
    Message message;
    message.source = rank_;
    message.tag = tag;
    if (bytes) message.data.assign(static_cast<const uint8_t*>(buffer), static_cast<const uint8_t*>(buffer) + bytes);
    message.send = request;
    message.due = state_->due_time(rank_, peer, message.order);
    ++state_->sent;
    Box& b = state_->box(peer);
    std::vector<int> senders;
    {
      std::lock_guard<std::mutex> lock(b.mutex);
      if (b.dead) return request;  // lost: the send never completes, as to a vanished host
      b.in_flight.push_back(std::move(message));
      senders = state_->deliver_due(b, Clock::now());
      ++b.events;
    }
    b.cv.notify_all();
    for (int sender : senders) {
      if (sender != rank_) state_->wake(sender);
    }
    return request;
  }

  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    auto request = make(false, peer, tag, bytes);
    request->buffer = buffer;
    request->ignore = ignore;
    if (peer >= 0) check_peer(peer);
    Box& b = state_->box(rank_);
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.dead) {
      fail(*request, "rank " + std::to_string(rank_) + " is dead");
      return request;
    }
    auto it = std::find_if(b.unexpected.begin(), b.unexpected.end(),
                           [&](const Message& m) { return matches(*request, m); });
    if (it != b.unexpected.end()) {
      receive_into(*request, *it);
      b.unexpected.erase(it);
    } else {
      b.receives.push_back(request);
    }
    return request;
  }

  void wake() override { state_->wake(rank_); }

  void progress(std::chrono::microseconds max_block) override {
    Box& b = state_->box(rank_);
    std::vector<int> senders;
    {
      std::unique_lock<std::mutex> lock(b.mutex);
      const uint64_t seen = b.events;
      const auto give_up = Clock::now() + max_block;
      for (;;) {
        auto now = Clock::now();
        auto woken = state_->deliver_due(b, now);
        senders.insert(senders.end(), woken.begin(), woken.end());
        if (b.events != seen || now >= give_up) break;
        auto until = give_up;
        for (const Message& m : b.in_flight) until = std::min(until, m.due);
        b.cv.wait_until(lock, until);
      }
    }
    for (int sender : senders) {
      if (sender != rank_) state_->wake(sender);
    }
  }

  void cancel_all(const std::string& reason) override {
    {
      Box& b = state_->box(rank_);
      std::lock_guard<std::mutex> lock(b.mutex);
      for (auto& request : b.receives) fail(*request, reason);
      b.receives.clear();
    }
    // Our messages still on their way are withdrawn; their sends fail.
    for (int r = 0; r < state_->size(); ++r) {
      Box& b = state_->box(r);
      std::lock_guard<std::mutex> lock(b.mutex);
      auto mine = std::stable_partition(b.in_flight.begin(), b.in_flight.end(),
                                        [this](const Message& m) { return m.source != rank_; });
      for (auto it = mine; it != b.in_flight.end(); ++it) fail(*it->send, reason);
      b.in_flight.erase(mine, b.in_flight.end());
    }
  }

 private:
  std::shared_ptr<MemoryRequest> make(bool is_send, int peer, Tag tag, size_t bytes) {
    auto request = std::make_shared<MemoryRequest>();
    request->is_send = is_send;
    request->peer = peer;
    request->tag = tag;
    request->bytes_posted = bytes;
    return request;
  }
  void check_peer(int peer) const {
    if (peer < 0 || peer >= state_->size()) {
      throw InvalidUsageError("memory fabric: peer " + std::to_string(peer) + " is outside 0.." +
                              std::to_string(state_->size() - 1));
    }
  }
  bool dead() {
    Box& b = state_->box(rank_);
    std::lock_guard<std::mutex> lock(b.mutex);
    return b.dead;
  }

  std::shared_ptr<MemoryFabric::State> state_;
  int rank_;
};

}  // namespace

MemoryFabric::MemoryFabric(int ranks, MemoryFaults faults) {
  if (ranks < 1) throw InvalidUsageError("memory fabric: " + std::to_string(ranks) + " ranks");
  state_ = std::make_shared<State>(ranks, faults);
}

MemoryFabric::~MemoryFabric() = default;

int MemoryFabric::size() const { return state_->size(); }

std::unique_ptr<Endpoint> MemoryFabric::endpoint(int rank) {
  if (rank < 0 || rank >= size()) {
    throw InvalidUsageError("memory fabric: rank " + std::to_string(rank) + " is outside 0.." +
                            std::to_string(size() - 1));
  }
  return std::make_unique<MemoryEndpoint>(state_, rank);
}

void MemoryFabric::kill(int rank) {
  const std::string why = "rank " + std::to_string(rank) + " was killed";
  {
    Box& b = state_->box(rank);
    std::lock_guard<std::mutex> lock(b.mutex);
    b.dead = true;
    for (auto& request : b.receives) fail(*request, why);
    b.receives.clear();
    for (Message& m : b.in_flight) m.send.reset();  // messages to it are lost; their sends never complete
    b.in_flight.clear();
    b.unexpected.clear();
    ++b.events;
  }
  state_->box(rank).cv.notify_all();
  // What it had on its way to others is lost with it; its own sends fail (its thread learns it is dead).
  for (int r = 0; r < size(); ++r) {
    if (r == rank) continue;
    Box& b = state_->box(r);
    std::lock_guard<std::mutex> lock(b.mutex);
    auto lost = std::stable_partition(b.in_flight.begin(), b.in_flight.end(),
                                      [rank](const Message& m) { return m.source != rank; });
    for (auto it = lost; it != b.in_flight.end(); ++it) fail(*it->send, why);
    b.in_flight.erase(lost, b.in_flight.end());
  }
}

uint64_t MemoryFabric::messages_sent() const { return state_->sent.load(); }

}  // namespace hiercoll::transport
