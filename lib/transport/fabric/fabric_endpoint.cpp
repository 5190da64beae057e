// libfabric transport: one FI_EP_RDM endpoint with tagged messages, one completion queue and an address vector
// indexed by rank (FI_AV_TABLE), on the process's domain for its NIC (fabric_domain.hpp: shared by every
// communicator, with the registrations, for providers that need registered buffers). Which provider and which of its
// NICs: provider_choice.cpp. Registrations: mr_registry.hpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "hiercoll/errors.hpp"
#include "topo/net.hpp"
#include "transport/fabric/fabric_domain.hpp"
#include "transport/fabric/libfabric.hpp"
#include "transport/fabric/provider_choice.hpp"
#include "transport/mr_registry.hpp"
#include "transport/striped_endpoint.hpp"
#include "transport/transport.hpp"

namespace hiercoll::transport {
namespace {

// Whether acknowledgements, retransmits and handshakes move only inside calls: control_progress in libfabric 1.x;
// libfabric 2.x replaces both progress fields by one, `progress`, which its headers carry and a 2.x provider may leave
// the old ones unset beside (FI_PROGRESS_UNSPEC), and then data_progress, set alone, speaks for both. Manual data
// progress alone (tcp's RxM) needs no keeper: fi_trywait and the reads drive the data while a rank waits.
bool manual_control_progress(const fi_domain_attr& domain) {
  bool manual = domain.control_progress == FI_PROGRESS_MANUAL ||
                (domain.control_progress == FI_PROGRESS_UNSPEC && domain.data_progress == FI_PROGRESS_MANUAL);
#if FI_MAJOR_VERSION >= 2
  manual = manual || domain.progress == FI_PROGRESS_MANUAL;
#endif
  return manual;
}

void check_fi(const char* call, ssize_t rc) {
  if (rc != 0) throw FabricError(fabric_call_failed(call, rc));
}

struct FabricRequest;
// The completion context libfabric hands back: the provider owns fi_context2, we find the request behind it.
struct CompletionContext {
  fi_context2 provider_space;
  FabricRequest* request;
};

struct FabricRequest : Request {
  CompletionContext completion{{}, this};
  RequestPtr self;  // keeps the request alive while the provider may still touch `completion`
  MrRegistry::Lease registration;
  void* context() { return &completion.provider_space; }
  static FabricRequest* from_context(void* context) { return static_cast<CompletionContext*>(context)->request; }
};

class FabricEndpoint final : public Endpoint {
 public:
  // Takes `info` (one domain's, dupinfo'd; freed by close()).
  FabricEndpoint(const FabricOptions& options, fi_info* info, std::string why) : info_(info), nic_why_(std::move(why)) {
    // A constructor that throws runs no destructor: what was opened before the failing step is closed here.
    try {
      open(options);
    } catch (...) {
      close();
      throw;
    }
  }

  ~FabricEndpoint() override {
    stop_keeper();
    cancel_all("endpoint closed");
    close();
  }

  std::string provider() const override { return info_->fabric_attr->prov_name; }
  // RxM (the tcp provider's RDM layer) sends messages up to its bounce-buffer size eagerly, larger ones by
  // segmentation or rendezvous (fi_rxm(7)). That size is FI_OFI_RXM_BUFFER_SIZE, 16 KB by default, which Settings
  // reads for us (FabricOptions); the endpoint's inject size does not report it (64 here).
  size_t eager_bytes() const override {
    return provider().find("ofi_rxm") == std::string::npos ? 0 : rxm_buffer_bytes_;
  }

  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> name(256);
    size_t length = name.size();
    int rc = fi_getname(&ep_->fid, name.data(), &length);
    if (rc == -FI_ETOOSMALL) {
      name.resize(length);
      rc = fi_getname(&ep_->fid, name.data(), &length);
    }
    check_fi("fi_getname", rc);
    name.resize(length);
    return name;
  }

  // Addresses are kept, and each is inserted into the address vector at the first send to its rank: a rank talks to
  // its ring and rail peers, a few of the N, and on EFA every inserted address is an address handle on the NIC
  // (aws-ofi-nccl inserts lazily too). Receives name no source (the rank is in the tag), and every provider but
  // shm takes a message from a peer it has not inserted; shm, one host and at most kShmMostRanks, inserts all.
  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    auto lock = driving();
    my_rank_ = my_rank;
    addresses_ = addresses;
    peers_.assign(addresses.size(), FI_ADDR_NOTAVAIL);
    if (provider() == "shm") {
      for (size_t i = 0; i < addresses.size(); ++i) peer_address(static_cast<int>(i));
    }
    if (manual_control_ && !keeper_.joinable()) keeper_ = std::thread([this] { keep_progress(); });
  }

  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override {
    auto lock = driving();
    auto request = make_request(true, peer, tag, bytes, buffer);
    fi_addr_t address = peer_address(peer);
    submit(request, "fi_tsend", [this, request, buffer, bytes, address, tag] {
      return fi_tsend(ep_, buffer, bytes, descriptor(*request), address, tag, request->context());
    });
    return request;
  }

  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    auto lock = driving();
    auto request = make_request(false, peer, tag, bytes, buffer);
    // The source rank is part of the tag (see algo/channel.hpp), so receives need no FI_DIRECTED_RECV.
    submit(request, "fi_trecv", [this, request, buffer, bytes, tag, ignore] {
      return fi_trecv(ep_, buffer, bytes, descriptor(*request), FI_ADDR_UNSPEC, tag, ignore, request->context());
    });
    return request;
  }

  bool progress(std::chrono::microseconds max_block) override {
    if (poll_once()) {
      completed();
      return true;
    }
    if (max_block.count() <= 0) return false;
    return wait(max_block);
  }

  // Sleeps where wait_hint() says, beside the wake eventfd, and polls; outside the domain's lock, which other
  // communicators' threads share (fabric_domain.hpp), so nothing sleeps inside the provider (fi_cq_sread would hold
  // it). With a CQ wait fd (tcp): until the fd turns readable, once fi_trywait found nothing pending.
  // Without a CQ wait object (EFA before libfabric 2.5, or HIERCOLL_FABRIC_CQ_WAIT=0) nothing in the provider can be
  // slept on, and its progress is manual: a peer's handshake, an acknowledgement, a retransmit move only while this
  // rank calls in, and they complete nothing the rank would see. So while a transfer is under way (requests in
  // flight, and the last completion or post within the busy window, in_transfer()) the wait polls without pause,
  // yielding the core between polls, as aws-ofi-nccl polls while an operation is in flight; a pause there stalls the
  // sender's window for the pause's length (docs/cluster.md, udp before and after). Otherwise, after a few yields,
  // it sleeps on the wake eventfd for a pause that doubles while nothing completes (kIdlePauseMax at most, the cost of
  // a late message): an idle rank, or one whose peer is late past the window, costs a poll per pause. The keeper
  // writes the eventfd too when it completes something.
  bool wait(std::chrono::microseconds max_block) {
    const auto deadline = std::chrono::steady_clock::now() + max_block;
    for (;;) {
      const WaitHint hint = wait_hint();
      bool fd_woke = false;  // the CQ fd ended the sleep
      if (hint.within.count() == 0) {
        // With a CQ fd, fi_trywait found work pending in the provider (RxM's segments to reassemble, its own
        // queue's entries): poll again at once, as fi_cq_sread does; yielding there cost RxM's 512 KB messages 15%
        // (git log -S "fi_trywait found work"). Mid-transfer on the no-wait-object path: give the core up between
        // polls.
        if (hint.fd == wake_fd_.get()) sched_yield();
      } else {
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
        const auto us = std::max<int64_t>(0, std::min(hint.within, left).count());
        timespec ts{};
        ts.tv_sec = static_cast<time_t>(us / 1000000);
        ts.tv_nsec = static_cast<long>((us % 1000000) * 1000);
        pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {hint.fd, POLLIN, 0}};
        const nfds_t count = hint.fd >= 0 && hint.fd != wake_fd_.get() ? 2 : 1;
        if (ppoll(fds, count, &ts, nullptr) > 0 && (fds[0].revents & POLLIN) != 0) {
          drain_wake_fd();
          return true;  // woken (halt, new work, the keeper's completions): the caller looks at its flags
        }
        fd_woke = count == 2 && (fds[1].revents & POLLIN) != 0;
      }
      if (poll_once()) {
        completed();
        return true;
      }
      if (fd_woke) woke_for_nothing();
      if (std::chrono::steady_clock::now() >= deadline) return false;
    }
  }

  // With a CQ wait fd (FI_WAIT_FD): the fd, to sleep on once fi_trywait says nothing is pending that the fd would
  // miss. Without one: the manual path's pause.
  WaitHint wait_hint() override {
    if (cq_fd_ < 0 || fd_wakes_for_nothing()) return manual_wait_hint();
    WaitHint hint;
    hint.fd = cq_fd_;
    auto lock = driving();
    fid* cq = &cq_->fid;
    if (fi_trywait(domain_->fabric(), &cq, 1) != 0) hint.within = std::chrono::microseconds(0);
    return hint;
  }

  // Every wait sleeps beside the wake eventfd (wait()), which this writes: no call into the provider from a thread
  // that does not hold the domain's lock.
  void wake() override {
    const uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof one) < 0) {
    }  // the counter is saturated: a wake is pending anyway
  }

  std::shared_ptr<const void> pin(const void* buffer, size_t bytes) override {
    if (!needs_mr_ || bytes == 0 || buffer == nullptr) return nullptr;
    auto lock = driving();
    return acquire_registration(buffer, bytes);
  }

  Stats stats() const override {
    Stats stats;
    if (needs_mr_) {
      stats.registrations_made = domain_->registrations_made();
      stats.registrations_held = domain_->registrations_held();
    }
    stats.addresses_inserted = inserted_.load(std::memory_order_relaxed);
    return stats;
  }

  void quiesce(std::chrono::milliseconds limit) override {
    if (!manual_control_) return;
    const auto start = std::chrono::steady_clock::now();
    auto last_activity = start;
    while (std::chrono::steady_clock::now() - start < limit) {
      if (poll_once()) last_activity = std::chrono::steady_clock::now();
      auto lock = driving();
      bool sending = !backlog_.empty();
      for (FabricRequest* request : in_flight_) sending = sending || request->is_send;
      if (!sending && std::chrono::steady_clock::now() - last_activity >= kQuietBeforeLeaving) return;
      sched_yield();
    }
  }

  std::string domain() const override { return info_->domain_attr->name ? info_->domain_attr->name : ""; }

  std::string host_of(const std::vector<uint8_t>& address) const override {
    // sockaddr formats (tcp, udp, sockets, net): the IP part. Others (EFA's GID + QPN, shm's name) carry no host.
    const uint32_t format = info_->addr_format;
    if ((format == FI_SOCKADDR || format == FI_SOCKADDR_IN) && address.size() >= sizeof(sockaddr_in)) {
      sockaddr_in in{};
      std::memcpy(&in, address.data(), sizeof in);
      if (in.sin_family == AF_INET) {
        char text[INET_ADDRSTRLEN] = {0};
        inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
        return text;
      }
    }
    if ((format == FI_SOCKADDR || format == FI_SOCKADDR_IN6) && address.size() >= sizeof(sockaddr_in6)) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, address.data(), sizeof in6);
      if (in6.sin6_family == AF_INET6) {
        char text[INET6_ADDRSTRLEN] = {0};
        inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
        return text;
      }
    }
    return {};
  }

  // Every request fails with `reason`, and none is left targeting its buffer when this returns: the caller (the
  // communicator's failure path, on the thread that drives the endpoint) hands the error to its user, who may free
  // or reuse the buffers at once (torch does). Posted requests are cancelled; what the provider does not cancel (a
  // matched rendezvous receive on tcp's RxM, an EFA long read, a send to a dead peer in its retries) would still
  // write into or read from its buffer, from a live peer's data or the provider's own threads, so then the endpoint
  // is closed: after fi_close returns the provider touches none of them, and their registrations go with them. A
  // closed endpoint fails every later post (a broken communicator posts nothing more but its own teardown).
  void cancel_all(const std::string& reason) override {
    auto lock = driving();
    for (auto& pending : backlog_) finish_unposted(pending.request.get(), reason);
    backlog_.clear();
    if (!ep_) return;
    for (FabricRequest* request : in_flight_) {
      fi_cancel(&ep_->fid, request->context());
    }
    for (int i = 0; i < 10 && !in_flight_.empty(); ++i) drain_completions();
    if (in_flight_.empty()) return;
    HIERCOLL_LOG(kInfo, "fabric: closing the endpoint: " << in_flight_.size()
                                                         << " request(s) the provider would not cancel (" << reason
                                                         << ")");
    close_fabric_object(&ep_->fid, "fi_close(endpoint)");
    ep_ = nullptr;
    for (FabricRequest* request : std::unordered_set<FabricRequest*>(in_flight_)) finish(request, false, reason);
  }

 private:
  // Every call into the provider holds the domain's lock (FI_THREAD_DOMAIN, fabric_domain.hpp): other communicators'
  // endpoints share the domain, and where control progress is manual the keeper thread calls in too.
  std::unique_lock<std::recursive_mutex> driving() {
    return domain_ ? domain_->lock() : std::unique_lock<std::recursive_mutex>();
  }

  // Whether a transfer is under way: a request the provider still owes, and a sign of life (a completion, or a post
  // onto an idle endpoint) within the busy window. The window is four times the recent gap between completions
  // while requests were in flight (an exponential average), between kBusyWindowMin and kBusyWindowMax: a transfer
  // keeps the polling however slow its link, and a peer that is late gives it up after a few gaps. A gap counts at
  // most twice the average: a late peer's gap, tens of times the pace, would otherwise teach the wait to spin
  // through the next lateness; a slower link raises it over a few completions.
  bool in_transfer() {
    auto lock = driving();
    if (backlog_.empty() && in_flight_.empty()) return false;
    const int64_t window = std::clamp<int64_t>(4 * completion_gap_ns_, kBusyWindowMin.count(), kBusyWindowMax.count());
    return now_ns() - last_activity_ns_ < window;
  }

  // The no-wait-object path's next sleep: none while a transfer is under way or for the first kIdleYields polls of a
  // wait, then a pause that doubles while nothing completes (wait_without_cq_object says why). Each call counts as a
  // poll that found nothing; a completion (poll_once) starts the count again.
  WaitHint manual_wait_hint() {
    WaitHint hint;
    hint.fd = wake_fd_.get();
    hint.drain = true;
    ++idle_polls_;
    if (idle_polls_ <= kIdleYields || in_transfer()) {
      hint.within = std::chrono::microseconds(0);
    } else {
      const uint32_t doublings = std::min<uint32_t>(idle_polls_ - kIdleYields, 16);
      hint.within = std::min(kIdlePauseMin * (1u << doublings), kIdlePauseMax);
    }
    return hint;
  }

  // A poll found completions: the idle count and any streak of empty CQ fd wakes start again.
  void completed() {
    idle_polls_ = 0;
    empty_wakes_ = 0;
  }

  // The CQ fd woke a sleep and a poll then found nothing (kEmptyWakes says why that is counted).
  void woke_for_nothing() {
    if (empty_wakes_++ == 0) first_empty_wake_ns_ = now_ns();
  }

  bool fd_wakes_for_nothing() const {
    return empty_wakes_ >= kEmptyWakes && now_ns() - first_empty_wake_ns_ >= kEmptyWakeSpan.count();
  }

  void drain_wake_fd() {
    uint64_t count;
    if (::read(wake_fd_.get(), &count, sizeof count) < 0) {
    }  // already drained; a failed read leaves it readable, which only makes the next pause end at once
  }

  // Under driving(): a completion read while requests were in flight is a gap sample.
  void note_completions(bool were_owed) {
    const int64_t now = now_ns();
    if (were_owed) {
      const int64_t gap = std::min<int64_t>(now - last_activity_ns_, 2 * completion_gap_ns_);
      completion_gap_ns_ = std::max<int64_t>(kGapFloor.count(), (3 * completion_gap_ns_ + gap) / 4);
    }
    last_activity_ns_ = now;
  }

  // `peer`'s address in the address vector, inserted at its first use. Under driving().
  fi_addr_t peer_address(int peer) {
    fi_addr_t& address = peers_.at(static_cast<size_t>(peer));
    if (address == FI_ADDR_NOTAVAIL) {
      fi_addr_t inserted = FI_ADDR_NOTAVAIL;
      if (fi_av_insert(av_, addresses_[static_cast<size_t>(peer)].data(), 1, &inserted, 0, nullptr) != 1)
        throw FabricError("fi_av_insert of rank " + std::to_string(peer) + "'s address failed");
      address = inserted;
      inserted_.fetch_add(1, std::memory_order_relaxed);
    }
    return address;
  }

  // The driver's non-blocking pass: marks that it calls in (the keeper stays out meanwhile), then drive_once().
  bool poll_once() {
    last_call_ns_.store(now_ns(), std::memory_order_relaxed);
    return drive_once();
  }

  // One non-blocking pass into the provider: posts what waited for room, reads completions. True if any completed.
  bool drive_once() {
    auto lock = driving();
    post_backlog();
    const bool were_owed = !in_flight_.empty();
    const bool completed = drain_completions() > 0;
    if (completed) note_completions(were_owed);
    return completed;
  }

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The keeper: where acknowledgements, retransmits and handshakes move only inside calls (udp's ofi_rxd, efa), a
  // rank whose threads are busy elsewhere (a shared-memory phase, a long reduction, the caller's own work, an idle
  // communicator) must still answer, or its peers stall: a rank waiting on a node flag while the peer it owes an
  // acknowledgement waits on it is a deadlock under packet loss (commit 9efed68). While nobody has called in for a
  // tick, the keeper drives the provider once; the tick doubles from kKeeperTickMin to kKeeperTickMax while nothing
  // happens.
  void keep_progress() {
    auto tick = kKeeperTickMin;
    std::unique_lock<std::mutex> lock(keeper_mutex_);
    while (!keeper_stop_) {
      keeper_cv_.wait_for(lock, tick, [&] { return keeper_stop_; });
      if (keeper_stop_) break;
      const auto quiet = std::chrono::nanoseconds(now_ns() - last_call_ns_.load(std::memory_order_relaxed));
      if (quiet < tick) {
        tick = kKeeperTickMin;  // the driver is calling in itself
        continue;
      }
      const bool completed = drive_once();
      if (completed) wake();  // a driver asleep in its pause sees them now
      tick = completed ? kKeeperTickMin : std::min(tick * 2, kKeeperTickMax);
    }
  }

  void stop_keeper() {
    {
      std::lock_guard<std::mutex> lock(keeper_mutex_);
      keeper_stop_ = true;
    }
    keeper_cv_.notify_all();
    if (keeper_.joinable()) keeper_.join();
  }

  void open(const FabricOptions& options) {
    wake_fd_ = base::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_.valid()) throw SystemError(std::string("fabric: eventfd: ") + std::strerror(errno));
    domain_ = FabricDomain::open(*info_);
    auto lock = driving();
    fid_domain* const shared_domain = domain_->domain();

    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    check_fi("fi_av_open", fi_av_open(shared_domain, &av_attr, &av_, nullptr));

    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = 4096;
    // A wait fd lets progress() sleep until the provider has something instead of polling. Not where the provider's control
    // progress is manual (udp;ofi_rxd, efa): its acknowledgements, retransmits and handshakes move only inside
    // calls, and a rank asleep in the wait object makes none, so a lost acknowledgement stalls the sender (commit
    // ecff805). EFA before libfabric 2.5 has no wait object anyway (fi_cq_open fails), and HIERCOLL_FABRIC_CQ_WAIT=0
    // asks for none, so that that path is tested everywhere.
    // Nor on shm (libfabric 1.17): its fi_cq_sread yields in a loop instead of sleeping, and now and then misses both
    // the message and its own timeout, leaving start-up stuck past the communicator's timeout (commit ecff805).
    manual_control_ = manual_control_progress(*info_->domain_attr);
    const bool fd_wait_works = !manual_control_ && provider() != "shm";
    // Only an fd (FI_WAIT_FD), slept on outside the domain's lock (wait()); a provider without one is polled as the
    // manual-progress ones are.
    if (options.cq_wait && fd_wait_works) {
      cq_attr.wait_obj = FI_WAIT_FD;
      if (fi_cq_open(shared_domain, &cq_attr, &cq_, nullptr) == 0) {
        int fd = -1;
        if (fi_control(&cq_->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
          cq_fd_ = fd;
        } else {
          close_fabric_object(&cq_->fid, "fi_close(completion queue)");
          cq_ = nullptr;
        }
      } else {
        cq_ = nullptr;
      }
    }
    if (cq_ == nullptr) {
      cq_attr.wait_obj = FI_WAIT_NONE;
      check_fi("fi_cq_open", fi_cq_open(shared_domain, &cq_attr, &cq_, nullptr));
    }

    check_fi("fi_endpoint", fi_endpoint(shared_domain, info_, &ep_, nullptr));
    check_fi("fi_ep_bind(av)", fi_ep_bind(ep_, &av_->fid, 0));
    check_fi("fi_ep_bind(cq)", fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV));
    check_fi("fi_enable", fi_enable(ep_));

    FabricDomain::endpoint_opened();
    counted_ = true;

    needs_mr_ = (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0 || options.force_mr;
    rxm_buffer_bytes_ = options.rxm_buffer_bytes;
    const Libfabric& lib = libfabric();
    HIERCOLL_LOG(kInfo, "fabric: provider " << provider() << " (libfabric API " << fabric_version_text(lib.api())
                                            << ", library " << fabric_version_text(lib.version()) << "), NIC "
                                            << domain() << " (" << nic_why_
                                            << "), progress " << (manual_control_ ? "manual" : "auto")
                                            << ", cq wait " << (cq_fd_ >= 0 ? "fd" : "none") << ", mr "
                                            << (needs_mr_ ? "registered" : "not needed"));
  }

  // Closes whatever is open, children before parents; safe on a partly opened endpoint. The domain closes with its
  // last endpoint and registration (fabric_domain.hpp).
  void close() {
    {
      auto lock = driving();
      close_fabric_object(ep_ ? &ep_->fid : nullptr, "fi_close(endpoint)");
      // The closed endpoint completes nothing more: what it still held can go, and with it the registrations they
      // held.
      if (!in_flight_.empty())
        HIERCOLL_LOG(kTrace, "fabric: closing with " << in_flight_.size() << " request(s) the provider never completed");
      for (FabricRequest* request : std::unordered_set<FabricRequest*>(in_flight_))
        finish(request, false, "endpoint closed");
      close_fabric_object(cq_ ? &cq_->fid : nullptr, "fi_close(completion queue)");
      close_fabric_object(av_ ? &av_->fid : nullptr, "fi_close(address vector)");
      ep_ = nullptr;
      cq_ = nullptr;
      av_ = nullptr;
    }
    if (counted_) FabricDomain::endpoint_closed();
    counted_ = false;
    domain_.reset();
    if (info_) libfabric().freeinfo(info_);  // info_ exists only once libfabric loaded
    info_ = nullptr;
  }
  std::shared_ptr<FabricRequest> make_request(bool is_send, int peer, Tag tag, size_t bytes, const void* buffer) {
    auto request = std::make_shared<FabricRequest>();
    request->is_send = is_send;
    request->peer = peer;
    request->tag = tag;
    request->bytes_posted = bytes;
    if (needs_mr_ && bytes > 0) request->registration = acquire_registration(buffer, bytes);
    return request;
  }

  // Under driving().
  MrRegistry::Lease acquire_registration(const void* buffer, size_t bytes) {
    const uint64_t made = domain_->registrations_made();
    MrRegistry::Lease lease = domain_->register_memory(buffer, bytes);
    if (domain_->registrations_made() != made) {
      HIERCOLL_LOG(kTrace, "fabric: registered " << (lease->end - lease->begin) << " B at 0x" << std::hex << lease->begin
                                                << std::dec << " on " << domain() << "; "
                                                << domain_->registrations_held() << " held, "
                                                << domain_->registrations_made() << " made");
    }
    return lease;
  }

  void* descriptor(const FabricRequest& request) const {
    return request.registration ? request.registration->descriptor : nullptr;
  }

  // Posts now, or, when the provider's queues are full (FI_EAGAIN, e.g. while it cannot reach a peer),
  // keeps the post in a backlog that progress() retries in order. Never blocks: a request that cannot be
  // posted simply stays pending, and the waiter's deadline decides when to give up.
  void submit(const std::shared_ptr<FabricRequest>& request, const char* call, std::function<ssize_t()> post_fn) {
    if (!ep_) {  // closed by cancel_all after a failure
      finish_unposted(request.get(), std::string(call) + ": the endpoint was closed after an earlier failure");
      return;
    }
    if (backlog_.empty()) {
      ssize_t rc = post_fn();
      if (rc == 0) {
        track(request);
        return;
      }
      if (rc != -FI_EAGAIN) {
        throw FabricError(fabric_call_failed(call, rc) + " (rank " + std::to_string(my_rank_) + ", peer " +
                          std::to_string(request->peer) + ")");
      }
    }
    backlog_.push_back({request, call, std::move(post_fn)});  // after any earlier one: keeps posting order
  }

  void post_backlog() {
    while (!backlog_.empty()) {
      Pending& next = backlog_.front();
      ssize_t rc = next.post();
      if (rc == -FI_EAGAIN) return;
      if (rc == 0) {
        track(next.request);
      } else {
        finish_unposted(next.request.get(), fabric_call_failed(next.call, rc));
      }
      backlog_.pop_front();
    }
  }

  void finish_unposted(FabricRequest* request, const std::string& error) {
    request->registration.reset();
    request->error = error;
    request->state.store(Request::State::kFailed, std::memory_order_release);
  }

  // After a successful post the request is the provider's: keep it alive until its completion.
  void track(const std::shared_ptr<FabricRequest>& request) {
    request->self = request;
    if (in_flight_.empty()) last_activity_ns_ = now_ns();  // a transfer starts: the busy window runs from here
    in_flight_.insert(request.get());
  }

  void finish(FabricRequest* request, bool ok, const std::string& error) {
    in_flight_.erase(request);
    request->registration.reset();
    if (!ok) request->error = error;
    request->state.store(ok ? Request::State::kDone : Request::State::kFailed, std::memory_order_release);
    request->self.reset();  // may free the request: touch nothing after this
  }

  // Under driving().
  void complete(const fi_cq_tagged_entry* entries, ssize_t n) {
    for (ssize_t i = 0; i < n; ++i) {
      FabricRequest* request = FabricRequest::from_context(entries[i].op_context);
      if (!request->is_send) {
        request->bytes_done = entries[i].len;
        request->tag = entries[i].tag;
      } else {
        request->bytes_done = request->bytes_posted;
      }
      finish(request, true, {});
    }
  }

  // Reads the completions there are, without waiting. Under driving().
  int drain_completions() {
    fi_cq_tagged_entry entries[32];
    int completed = 0;
    for (;;) {
      const ssize_t n = fi_cq_read(cq_, entries, 32);
      if (n > 0) {
        complete(entries, n);
        completed += static_cast<int>(n);
        continue;
      }
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry error{};
        if (fi_cq_readerr(cq_, &error, 0) > 0) {
          FabricRequest* request = FabricRequest::from_context(error.op_context);
          std::string text;
          if (error.err == FI_ETRUNC) {
            // olen is the overflow, where the provider reports it (tcp;ofi_rxm leaves it 0).
            const std::string arrived = error.olen ? std::to_string(request->bytes_posted + error.olen) + " arrived"
                                                   : "a larger message arrived";
            text = "message truncated: the receive was posted for " + std::to_string(request->bytes_posted) +
                   " bytes but " + arrived + " (ranks disagree on the size of this operation)";
          } else if (error.err == FI_ECANCELED) {
            text = "cancelled";
          } else {
            text = fabric_strerror(error.err) + " (" +
                   fi_cq_strerror(cq_, error.prov_errno, error.err_data, nullptr, 0) + ")";
          }
          finish(request, false, text);
          ++completed;
        }
        continue;
      }
      if (n == -FI_EAGAIN || n == -FI_EINTR) return completed;
      throw FabricError(fabric_call_failed("fi_cq_read", n));
    }
  }

  static constexpr uint32_t kIdleYields = 16;
  // A CQ fd that wakes its sleeper again and again with nothing to read makes every wait a busy loop: libfabric
  // 1.17's net under RxM kept its fd readable while a rank waited for a late peer (docs/peers.md, "Small
  // messages between emulated nodes"), and RxM reads its connection events only every
  // FI_OFI_RXM_CM_PROGRESS_INTERVAL, its fd ready meanwhile.
  // After kEmptyWakes such wakes in a row spanning kEmptyWakeSpan, the waits take the no-wait-object path
  // (manual_wait_hint: polls while a transfer is under way, else pauses doubling to kIdlePauseMax, a poll each) until
  // something completes. The span keeps a message that arrives in many socket reads, each a wake that completes
  // nothing yet, from counting: its completion comes first.
  static constexpr uint32_t kEmptyWakes = 16;
  static constexpr std::chrono::nanoseconds kEmptyWakeSpan{std::chrono::milliseconds(1)};
  static constexpr std::chrono::microseconds kIdlePauseMin{8};
  static constexpr std::chrono::microseconds kIdlePauseMax{2000};
  static constexpr std::chrono::milliseconds kKeeperTickMin{1}, kKeeperTickMax{8};
  static constexpr std::chrono::nanoseconds kBusyWindowMin{std::chrono::milliseconds(2)};
  static constexpr std::chrono::nanoseconds kBusyWindowMax{std::chrono::milliseconds(100)};
  static constexpr std::chrono::nanoseconds kFirstGap{kBusyWindowMax / 40};  // a first window of a tenth of the most
  static constexpr std::chrono::nanoseconds kGapFloor{std::chrono::microseconds(10)};  // keeps the average growable
  // How long a leaving rank keeps answering after its last activity: several of a reliable-datagram provider's first
  // retransmit intervals, for a peer whose last acknowledgement was lost.
  static constexpr std::chrono::milliseconds kQuietBeforeLeaving{50};

  fi_info* info_ = nullptr;
  std::string nic_why_;
  std::shared_ptr<FabricDomain> domain_;  // shared with the process's other endpoints on this NIC
  bool counted_ = false;                  // in fabric_census()'s endpoints
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool manual_control_ = false;  // acknowledgements and retransmits only inside calls: the keeper runs
  std::atomic<int64_t> last_call_ns_{0};
  std::mutex keeper_mutex_;
  std::condition_variable keeper_cv_;
  bool keeper_stop_ = false;  // under keeper_mutex_
  std::thread keeper_;
  base::UniqueFd wake_fd_;  // the no-wait-object path sleeps on it; wake() writes it
  int cq_fd_ = -1;          // the CQ's wait fd (FI_WAIT_FD), where the provider offers one and waiting on it works
  uint32_t idle_polls_ = 0;
  uint32_t empty_wakes_ = 0;        // CQ fd wakes in a row that found nothing (kEmptyWakes); driver thread only
  int64_t first_empty_wake_ns_ = 0;  // when the streak began
  // in_transfer()'s clock, under driving(): the last completion or post onto an idle endpoint, and the average gap
  // between completions while requests were in flight (kFirstGap until a completion says otherwise).
  int64_t last_activity_ns_ = 0;
  int64_t completion_gap_ns_ = kFirstGap.count();
  bool needs_mr_ = false;
  size_t rxm_buffer_bytes_ = 0;
  int my_rank_ = -1;
  std::vector<fi_addr_t> peers_;                 // FI_ADDR_NOTAVAIL until the first send to the rank (peer_address)
  std::vector<std::vector<uint8_t>> addresses_;  // every rank's address, as connect() got them
  std::atomic<uint64_t> inserted_{0};            // addresses peer_address() inserted (stats())
  std::unordered_set<FabricRequest*> in_flight_;
  struct Pending {
    std::shared_ptr<FabricRequest> request;
    const char* call;
    std::function<ssize_t()> post;
  };
  std::deque<Pending> backlog_;  // posts the provider refused with FI_EAGAIN, in order
};

}  // namespace

// One FabricEndpoint per NIC of the rank's share, under a StripedEndpoint (striped_endpoint.hpp) even where the share
// is one NIC: every rank's published address then has the same form, whatever share its peers took.
std::unique_ptr<Endpoint> open_fabric_endpoint(const FabricOptions& options) {
  size_provider_buffers(options.rxm_rx_buffers, options.rxd_max_unacked);  // before the process's first fi_getinfo
  ProviderChoice chosen = choose_provider(options);
  std::vector<std::unique_ptr<Endpoint>> rails;
  for (size_t i = 0; i < chosen.infos.size(); ++i) {
    fi_info* info = chosen.infos[i];
    chosen.infos[i] = nullptr;  // the endpoint's now, also when its constructor throws
    rails.push_back(std::make_unique<FabricEndpoint>(options, info, i == 0 ? chosen.why : "the share's NIC " +
                                                                                             std::to_string(i + 1)));
  }
  return std::make_unique<StripedEndpoint>(std::move(rails), options.stripe_min_bytes);
}

}  // namespace hiercoll::transport
