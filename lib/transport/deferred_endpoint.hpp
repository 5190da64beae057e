#pragma once
// An endpoint that is opened on a thread of its own while its owner goes on, for the jobs that may never need it
// soon: on one host the collectives run through the node's shared memory, and what the fabric costs to open (the
// provider scan of libfabric's first fi_getinfo, then the exchange of every rank's address) would otherwise be
// paid by every rank inside Communicator::create, on cores the whole host shares. The first call that needs the
// real endpoint waits for it; calls that only look after it (wake, cancel_all, pin, stats, quiesce) do nothing
// until it is there, because nothing can have been posted to an endpoint that does not exist yet.
//
// Threads: start(), wait() and the Endpoint calls may come from any of the owner's threads (one driver at a time, as
// for any Endpoint); `open` runs on the opener thread and must bound its own waits. join() (also run by the
// destructor) waits for the opener; the owner calls it before destroying anything `open` uses.
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "transport/transport.hpp"

namespace hiercoll::transport {

class DeferredEndpoint final : public Endpoint {
 public:
  using Open = std::function<std::unique_ptr<Endpoint>()>;
  explicit DeferredEndpoint(Open open) : open_(std::move(open)) {}
  ~DeferredEndpoint() override { join(); }

  /// Starts opening on the opener thread; later calls do nothing.
  void start();
  /// The real endpoint, once open: starts the opening if nobody has, waits for it, and throws what `open` threw
  /// (every caller, every time).
  Endpoint& wait();
  /// The real endpoint if it is open, else null. Never waits.
  Endpoint* ready() const { return ready_.load(std::memory_order_acquire); }
  /// Waits for the opener thread, if one was started.
  void join();

  std::string provider() const override { return self().provider(); }
  size_t eager_bytes() const override { return self().eager_bytes(); }
  std::string domain() const override { return self().domain(); }
  std::string host_of(const std::vector<uint8_t>& address) const override { return self().host_of(address); }
  std::vector<uint8_t> address() const override { return self().address(); }
  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    wait().connect(my_rank, addresses);
  }
  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override {
    return opened().isend(peer, tag, buffer, bytes);
  }
  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    return opened().irecv(peer, tag, ignore, buffer, bytes);
  }
  std::shared_ptr<const void> pin(const void* buffer, size_t bytes) override;
  Stats stats() const override {
    const Endpoint* endpoint = ready();
    return endpoint ? endpoint->stats() : Stats{};
  }
  bool progress(std::chrono::microseconds max_block) override { return opened().progress(max_block); }
  WaitHint wait_hint() override { return opened().wait_hint(); }
  void wake() override;
  void cancel_all(const std::string& reason) override;
  void quiesce(std::chrono::milliseconds limit) override;

 private:
  Endpoint& opened() {
    Endpoint* endpoint = ready();
    return endpoint ? *endpoint : wait();
  }
  Endpoint& self() const { return const_cast<DeferredEndpoint*>(this)->opened(); }

  Open open_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool started_ = false, done_ = false;  // under mutex_
  std::unique_ptr<Endpoint> endpoint_;   // written by the opener before done_, read-only after
  std::exception_ptr error_;             // likewise
  std::atomic<Endpoint*> ready_{nullptr};
  std::thread thread_;
};

}  // namespace hiercoll::transport
