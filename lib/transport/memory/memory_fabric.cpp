#include "transport/memory/memory_fabric.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <unordered_map>
#include <vector>

#include "hiercoll/errors.hpp"
#include "transport/matching.hpp"

namespace hiercoll::transport {

namespace {

using Clock = std::chrono::steady_clock;

using MemoryRequest = MatchedRequest;

struct Message {
  int source = -1;
  Tag tag = 0;
  std::vector<uint8_t> data;
  std::shared_ptr<MemoryRequest> send;  // completes when the message is delivered
  Clock::time_point due;
  uint64_t order = 0;  // sending order, to deliver messages due at the same time in that order
};

using Matching = TagMatching<Message>;

// One rank's side of the fabric: messages on their way to it, those that arrived before their receive, its
// posted receives. Everything under `mutex`; `events` counts what a waiting owner should look at again.
struct Box {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Message> in_flight;
  Matching matching;
  uint64_t events = 0;
  bool dead = false;
  // An eventfd written beside every notification, for an owner that sleeps in ppoll beside other endpoints
  // (Endpoint::wait_hint); made by the first wait_hint(), -1 until then.
  std::atomic<int> event_fd{-1};
  ~Box() {
    if (event_fd.load() >= 0) ::close(event_fd.load());
  }
};

// Tells a waiting owner of `b` to look again; after `b.events` changed, without its lock.
void notify(Box& b) {
  b.cv.notify_all();
  const int fd = b.event_fd.load(std::memory_order_acquire);
  if (fd >= 0) {
    const uint64_t one = 1;
    if (::write(fd, &one, sizeof one) < 0) {
    }  // saturated: a wake is pending anyway
  }
}

// What the endpoints of one fabric share: the fault injection's random delays and the order they keep, and the
// message count. An endpoint's peers are its boxes, indexed by rank; the wire knows nothing of them.
struct Wire {
  Wire(MemoryFaults f, size_t ranks)
      : faults(f), n(ranks), rng(f.seed), last_due(f.max_delay.count() > 0 ? ranks * ranks : 0) {}
  const MemoryFaults faults;
  const size_t n;  // ranks, for last_due (0: no faults, no pair state)
  std::mutex rng_mutex;  // guards rng and last_due
  std::mt19937_64 rng;
  std::vector<Clock::time_point> last_due;  // [source * n + destination]: keeps a pair's order without reorder
  std::atomic<uint64_t> next_order{0};
  std::atomic<uint64_t> sent{0};

  Clock::time_point due_time(int source, int destination, uint64_t& order) {
    order = next_order.fetch_add(1, std::memory_order_relaxed);
    auto now = Clock::now();
    if (faults.max_delay.count() <= 0) return now;
    std::lock_guard<std::mutex> lock(rng_mutex);
    auto delay = std::chrono::microseconds(
        std::uniform_int_distribution<int64_t>(0, faults.max_delay.count())(rng));
    auto due = now + delay;
    auto& last = last_due[static_cast<size_t>(source) * n + static_cast<size_t>(destination)];
    if (!faults.reorder) due = std::max(due, last);
    last = std::max(last, due);
    return due;
  }
};

// Tells the owner of `b` to look again (a send of its completed). Takes only that box's lock.
void wake_box(Box& b) {
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    ++b.events;
  }
  notify(b);
}

// Delivers the due messages in `b` (locked by the caller): into a matching receive, else kept as unexpected.
// Returns the senders to wake.
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
    complete_request(*message.send, message.data.size());
    senders.push_back(message.source);
    if (auto receive = b.matching.take_receive(message.source, message.tag)) {
      deliver(*receive, message.source, message.tag, message.data);
    } else {
      message.send.reset();
      b.matching.arrive(std::move(message));
    }
    ++b.events;
  }
  return senders;
}

// `b`'s rank is gone: its receives fail, what was on its way to it is lost (those sends never complete, as to a
// vanished host), and nothing reaches it any more. Its owner, if it waits, looks again.
void kill_box(Box& b, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    b.dead = true;
    b.matching.fail_receives([&](MemoryRequest& r) { fail_request(r, why); });
    for (Message& m : b.in_flight) m.send.reset();
    b.in_flight.clear();
    b.matching.unexpected.clear();
    ++b.events;
  }
  notify(b);
}

// Takes back `source`'s messages still on their way to `b`; their sends fail with `why`.
void withdraw(Box& b, int source, const std::string& why) {
  std::lock_guard<std::mutex> lock(b.mutex);
  auto from_source = std::stable_partition(b.in_flight.begin(), b.in_flight.end(),
                                           [source](const Message& m) { return m.source != source; });
  for (auto it = from_source; it != b.in_flight.end(); ++it) fail_request(*it->send, why);
  b.in_flight.erase(from_source, b.in_flight.end());
}

using Boxes = std::vector<std::shared_ptr<Box>>;

// One rank's endpoint. `boxes_` (the peers', indexed by rank, its own at rank_) is fixed before the first message:
// given at construction (a MemoryFabric) or found at connect() (the process's registry, open_memory_endpoint).
class MemoryEndpoint : public Endpoint {
 public:
  MemoryEndpoint(std::shared_ptr<Wire> wire, int rank, std::shared_ptr<Box> own, Boxes boxes)
      : wire_(std::move(wire)), rank_(rank), own_(std::move(own)), boxes_(std::move(boxes)) {}

  ~MemoryEndpoint() override { cancel_all("endpoint closed"); }

  std::string provider() const override { return "memory"; }

  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> bytes(sizeof rank_);
    std::memcpy(bytes.data(), &rank_, sizeof rank_);
    return bytes;
  }

  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    if (my_rank != rank_ || addresses.size() != boxes_.size()) {
      throw InvalidUsageError("memory fabric: rank " + std::to_string(my_rank) + " of " +
                              std::to_string(addresses.size()) + " connected to the endpoint of rank " +
                              std::to_string(rank_) + " of " + std::to_string(boxes_.size()));
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
    auto request = MatchedRequest::send(peer, tag, bytes);
    check_peer(peer);
    if (dead()) {
      fail_request(*request, "rank " + std::to_string(rank_) + " is dead");
      return request;
    }
    Message message;
    message.source = rank_;
    message.tag = tag;
    if (bytes) message.data.assign(static_cast<const uint8_t*>(buffer), static_cast<const uint8_t*>(buffer) + bytes);
    message.send = request;
    message.due = wire_->due_time(rank_, peer, message.order);
    ++wire_->sent;
    Box& b = box(peer);
    std::vector<int> senders;
    {
      std::lock_guard<std::mutex> lock(b.mutex);
      if (b.dead) return request;  // lost: the send never completes, as to a vanished host
      b.in_flight.push_back(std::move(message));
      senders = deliver_due(b, Clock::now());
      ++b.events;
    }
    notify(b);
    wake_senders(senders);
    return request;
  }

  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    auto request = MatchedRequest::receive(peer, tag, ignore, buffer, bytes);
    if (peer >= 0) check_peer(peer);
    Box& b = *own_;
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.dead) {
      fail_request(*request, "rank " + std::to_string(rank_) + " is dead");
      return request;
    }
    Message arrived;
    if (b.matching.take_unexpected(*request, arrived)) {
      deliver(*request, arrived.source, arrived.tag, arrived.data);
    } else {
      b.matching.post(request);
    }
    return request;
  }

  void wake() override { wake_box(*own_); }

  bool progress(std::chrono::microseconds max_block) override {
    Box& b = *own_;
    std::vector<int> senders;
    bool any = false;
    {
      std::unique_lock<std::mutex> lock(b.mutex);
      const uint64_t seen = b.events;
      const auto give_up = Clock::now() + max_block;
      for (;;) {
        auto now = Clock::now();
        auto woken = deliver_due(b, now);
        senders.insert(senders.end(), woken.begin(), woken.end());
        if (b.events != seen || now >= give_up) {
          any = b.events != seen;
          break;
        }
        auto until = give_up;
        for (const Message& m : b.in_flight) until = std::min(until, m.due);
        b.cv.wait_until(lock, until);
      }
    }
    wake_senders(senders);
    return any;
  }

  // The box's eventfd, and the time until the next delayed message is due.
  WaitHint wait_hint() override {
    Box& b = *own_;
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.event_fd.load() < 0) {
      const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (fd < 0) throw SystemError(std::string("memory fabric: eventfd: ") + std::strerror(errno));
      b.event_fd.store(fd, std::memory_order_release);
    }
    WaitHint hint;
    hint.fd = b.event_fd.load();
    hint.drain = true;
    const auto now = Clock::now();
    for (const Message& m : b.in_flight) {
      const auto until_due = std::chrono::ceil<std::chrono::microseconds>(std::max(m.due - now, Clock::duration::zero()));
      hint.within = std::min(hint.within, until_due);
    }
    return hint;
  }

  void cancel_all(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(own_->mutex);
      own_->matching.fail_receives([&](MemoryRequest& r) { fail_request(r, reason); });
    }
    // Our messages still on their way are withdrawn; their sends fail.
    for (const auto& peer : boxes_) withdraw(*peer, rank_, reason);
  }

 protected:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= static_cast<int>(boxes_.size())) {
      throw InvalidUsageError("memory fabric: peer " + std::to_string(peer) + " is outside 0.." +
                              std::to_string(static_cast<int>(boxes_.size()) - 1));
    }
  }

  std::shared_ptr<Wire> wire_;
  int rank_;
  std::shared_ptr<Box> own_;
  Boxes boxes_;

 private:
  Box& box(int rank) { return *boxes_[static_cast<size_t>(rank)]; }
  void wake_senders(const std::vector<int>& senders) {
    for (int sender : senders) {
      if (sender != rank_) wake_box(box(sender));
    }
  }
  bool dead() {
    std::lock_guard<std::mutex> lock(own_->mutex);
    return own_->dead;
  }
};

// The endpoints open_memory_endpoint() made and not yet closed, by id: how connect() finds a peer's box from the
// address it published. Leaked on purpose: endpoints may close while the process exits.
struct Registry {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::weak_ptr<Box>> boxes;
  uint64_t next_id = 1;
};
Registry& registry() {
  static Registry* const instance = new Registry;
  return *instance;
}

// An endpoint of the process's memory provider: its address is (process, id); its rank and peers are known at
// connect(). Closing it kills its box, as a rank's exit would: what was on its way to it is lost.
class RegisteredEndpoint final : public MemoryEndpoint {
 public:
  RegisteredEndpoint() : MemoryEndpoint(no_faults(), -1, std::make_shared<Box>(), {}) {
    std::lock_guard<std::mutex> lock(registry().mutex);
    id_ = registry().next_id++;
    registry().boxes.emplace(id_, own_);
  }
  ~RegisteredEndpoint() override {
    {
      std::lock_guard<std::mutex> lock(registry().mutex);
      registry().boxes.erase(id_);
    }
    cancel_all("endpoint closed");
    kill_box(*own_, "endpoint closed");
  }

  std::vector<uint8_t> address() const override {
    const auto pid = static_cast<uint32_t>(getpid());
    std::vector<uint8_t> bytes(sizeof pid + sizeof id_);
    std::memcpy(bytes.data(), &pid, sizeof pid);
    std::memcpy(bytes.data() + sizeof pid, &id_, sizeof id_);
    return bytes;
  }

  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    if (!boxes_.empty()) throw InvalidUsageError("memory provider: the endpoint is already connected");
    if (my_rank < 0 || my_rank >= static_cast<int>(addresses.size())) {
      throw InvalidUsageError("memory provider: rank " + std::to_string(my_rank) + " of " +
                              std::to_string(addresses.size()));
    }
    const auto pid = static_cast<uint32_t>(getpid());
    Boxes boxes;
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (size_t r = 0; r < addresses.size(); ++r) {
      uint32_t their_pid = 0;
      uint64_t id = 0;
      if (addresses[r].size() != sizeof their_pid + sizeof id) {
        throw InvalidUsageError("memory provider: rank " + std::to_string(r) + "'s address (" +
                                std::to_string(addresses[r].size()) + " bytes) is not a memory endpoint's: every "
                                "rank must choose the memory provider");
      }
      std::memcpy(&their_pid, addresses[r].data(), sizeof their_pid);
      std::memcpy(&id, addresses[r].data() + sizeof their_pid, sizeof id);
      if (their_pid != pid) {
        throw InvalidUsageError("memory provider: rank " + std::to_string(r) + " runs in process " +
                                std::to_string(their_pid) + ", not in this one (" + std::to_string(pid) +
                                "): the memory provider joins only ranks that are threads of one process");
      }
      auto found = registry().boxes.find(id);
      std::shared_ptr<Box> box = found == registry().boxes.end() ? nullptr : found->second.lock();
      if (!box) throw RemoteError("memory provider: rank " + std::to_string(r) + "'s endpoint is closed");
      if (static_cast<int>(r) == my_rank && box != own_) {
        throw InvalidUsageError("memory provider: rank " + std::to_string(r) + "'s address is not this endpoint's");
      }
      boxes.push_back(std::move(box));
    }
    rank_ = my_rank;
    boxes_ = std::move(boxes);
  }

 private:
  static std::shared_ptr<Wire> no_faults() {
    static const auto wire = std::make_shared<Wire>(MemoryFaults{}, 0);
    return wire;
  }
  uint64_t id_ = 0;
};

}  // namespace

std::unique_ptr<Endpoint> open_memory_endpoint() { return std::make_unique<RegisteredEndpoint>(); }

struct MemoryFabric::State {
  State(int n, MemoryFaults f) : wire(std::make_shared<Wire>(f, static_cast<size_t>(n))) {
    for (int r = 0; r < n; ++r) boxes.push_back(std::make_shared<Box>());
  }
  std::shared_ptr<Wire> wire;
  Boxes boxes;
  int size() const { return static_cast<int>(boxes.size()); }
  Box& box(int rank) { return *boxes[static_cast<size_t>(rank)]; }
};

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
  return std::make_unique<MemoryEndpoint>(state_->wire, rank, state_->boxes[static_cast<size_t>(rank)], state_->boxes);
}

void MemoryFabric::kill(int rank) {
  const std::string why = "rank " + std::to_string(rank) + " was killed";
  kill_box(state_->box(rank), why);
  // What it had on its way to others is lost with it; its own sends fail (its thread learns it is dead).
  for (int r = 0; r < size(); ++r) {
    if (r != rank) withdraw(state_->box(r), rank, why);
  }
}

uint64_t MemoryFabric::messages_sent() const { return state_->wire->sent.load(); }

}  // namespace hiercoll::transport
