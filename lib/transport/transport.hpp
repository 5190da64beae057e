#pragma once
// The transport contract every algorithm is written against: tagged, non-blocking point-to-point
// messages between ranks of one world. Algorithms never see libfabric, shared memory or CUDA.
//
// Threading: an Endpoint is driven by one thread at a time (the communicator's progress thread).
// Blocking: isend/irecv never block for long; progress() blocks at most `max_block`.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hiercoll::transport {

using Tag = uint64_t;

/// Tags with this bit set are messages whose receive may be posted larger than what is sent (point-to-point work,
/// receives from any source): an endpoint passes them whole. Without it, a receive names its peer and is posted for
/// exactly the bytes sent (every collective's messages, algo/channel.hpp), so sender and receiver can cut a message
/// the same way (StripedEndpoint).
inline constexpr Tag kWholeMessageBit = Tag{1} << 47;

/// State of one posted send or receive, shared by the poster and the endpoint until it completes.
struct Request {
  enum class State { kPending, kDone, kFailed };
  std::atomic<State> state{State::kPending};
  bool is_send = false;
  int peer = -1;
  Tag tag = 0;             ///< Receives, once done: the tag of the message that completed it.
  size_t bytes_posted = 0;
  size_t bytes_done = 0;  ///< Receives: bytes the message held (smaller than posted if the sender sent less).
  int source = -1;        ///< Receives posted for any source: who sent it (from the tag).
  std::string error;      ///< Set when kFailed.

  bool done() const { return state.load(std::memory_order_acquire) != State::kPending; }
  virtual ~Request() = default;
};
using RequestPtr = std::shared_ptr<Request>;

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  /// Name of the provider actually in use, e.g. "tcp;ofi_rxm".
  virtual std::string provider() const = 0;
  /// Largest message the provider sends eagerly where larger ones take a handshake (0: no such limit known).
  virtual size_t eager_bytes() const { return 0; }
  /// The NIC (libfabric domain) the endpoint runs on, e.g. "eth0", "rdmap16s27-rdm".
  virtual std::string domain() const { return {}; }
  /// The host part of a published address (an IP for the socket-based providers), "" where the format has none:
  /// lets start-up see two hosts publishing one address, which reaches neither from the other.
  virtual std::string host_of(const std::vector<uint8_t>& address) const {
    (void)address;
    return {};
  }
  /// Opaque address to publish to the peers.
  virtual std::vector<uint8_t> address() const = 0;
  /// Makes rank i reachable at addresses[i]; called once with every rank's address.
  virtual void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) = 0;

  /// Posts a send of `bytes` to `peer`. The buffer must stay valid until the request is done.
  virtual RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) = 0;
  /// Posts a receive from `peer` (or any peer if peer < 0) of a message whose tag matches `tag`
  /// in every bit not set in `ignore`.
  virtual RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) = 0;
  /// Where the provider needs registered memory: registers [buffer, buffer + bytes) (whole pages) for the requests
  /// about to use it, which then find it instead of registering each its own piece; it lives while the result is
  /// held (and while requests use it), which the caller keeps while the operation runs, or for as long as the buffer
  /// lives for a buffer of its own. Null where nothing needs registering. Driver thread only.
  virtual std::shared_ptr<const void> pin(const void* buffer, size_t bytes) {
    (void)buffer;
    (void)bytes;
    return nullptr;
  }
  /// Counters since the endpoint opened: memory registrations (mr_registry.hpp) made and held now, zero where the
  /// provider registers nothing; peers' addresses inserted into the provider's address vector (at the first send to
  /// each, not for every rank at start-up). Thread-safe.
  struct Stats {
    uint64_t registrations_made = 0;
    uint64_t registrations_held = 0;
    uint64_t addresses_inserted = 0;
  };
  virtual Stats stats() const { return {}; }
  /// Drives communication and completes requests; returns after at least one completion, a wake(), or `max_block`.
  /// Never busy-spins for the whole of max_block: it sleeps in the provider's wait object or backs off. Returns
  /// whether it completed anything or was woken (false: `max_block` passed with nothing to show).
  virtual bool progress(std::chrono::microseconds max_block) = 0;

  /// How a caller that drives several endpoints from one thread (StripedEndpoint) sleeps on this one once
  /// progress(0) found nothing: until `fd` turns readable (-1: there is none), for at most `within` (zero: a transfer
  /// is under way, poll again at once). Where `drain`, `fd` is an eventfd of the endpoint's that the caller reads
  /// once it fired; otherwise the caller leaves it alone. Driver thread only.
  struct WaitHint {
    int fd = -1;
    bool drain = false;
    std::chrono::microseconds within = std::chrono::microseconds::max();
  };
  virtual WaitHint wait_hint() = 0;
  /// Makes a progress() blocked in another thread return now. Thread-safe; the one call an endpoint takes from a
  /// thread other than its driver's (the communicator halting, new work for a thread that sleeps in the endpoint).
  /// Lets waits block for long stretches instead of waking every few milliseconds to look at flags.
  virtual void wake() = 0;
  /// Cancels everything still posted; their requests fail with `reason`. A request the provider cannot cancel (a
  /// send already on the wire) stays the endpoint's until the provider reports it or the endpoint is destroyed.
  virtual void cancel_all(const std::string& reason) = 0;
  /// Before destruction, where the provider acknowledges and retransmits only inside its calls (udp;ofi_rxd, efa:
  /// a peer's send to this rank completes only once this rank calls in): drives progress until this rank's own sends
  /// have completed and nothing has arrived for a little while, or `limit` has passed, so that a peer's last message
  /// is acknowledged before this rank goes. Returns at once elsewhere.
  virtual void quiesce(std::chrono::milliseconds limit) { (void)limit; }
};

/// Options for opening the fabric endpoint (filled from CommOptions and the environment).
struct FabricOptions {
  std::string provider;   ///< "tcp", "shm", "efa", "unix", "memory"...; empty: the rule of open_endpoint.
  std::string interface;  ///< HIERCOLL_FABRIC_IFACE: NICs to choose among (fabric/nic_choice.hpp); empty: the rule.
  std::string rendezvous_host;  ///< the store's host, where known: the NIC that routes there marks the data NICs
  int local_rank = 0;           ///< picks this rank's NIC among the node's (rail l on NIC l)
  int local_size = 1;           ///< ranks on this node
  /// Each local rank's CPUs (topo::cpu_share(), by local rank): which NICs sit near which ranks (nic_choice.hpp's
  /// rule 4); empty: this process's binding alone.
  std::vector<std::string> local_cpu_shares;
  bool across_nodes = false;    ///< false: every rank on one node, loopback will do
  bool cq_wait = true;          ///< HIERCOLL_FABRIC_CQ_WAIT: false opens the CQ without a wait object
  bool force_mr = false;  ///< Register memory even if the provider does not require it (HIERCOLL_FABRIC_FORCE_MR).
  size_t rxm_buffer_bytes = 16 << 10;  ///< RxM's eager size, libfabric's FI_OFI_RXM_BUFFER_SIZE (see eager_bytes()).
  size_t rxm_rx_buffers = 1024;  ///< RxM's posted receive buffers, libfabric's FI_OFI_RXM_MSG_RX_SIZE, where unset.
  size_t rxd_max_unacked = 16;   ///< RxD's send window per peer, libfabric's FI_OFI_RXD_MAX_UNACKED, where unset.
  /// A collective message is cut over a rank's NICs where each part gets at least this much (HIERCOLL_STRIPE_MIN_BYTES,
  /// striped_endpoint.hpp).
  size_t stripe_min_bytes = 128 << 10;
};

/// Opens a libfabric FI_EP_RDM endpoint with tagged messaging, on the process's domain for each NIC of the rank's
/// share (fabric/fabric_domain.hpp: one per NIC, shared by every communicator of the process).
std::unique_ptr<Endpoint> open_fabric_endpoint(const FabricOptions& options);

/// libfabric objects open in this process, every communicator's together. Thread-safe.
struct FabricCensus {
  uint64_t fabrics = 0;
  uint64_t domains = 0;    ///< one per NIC in use, whatever the number of communicators
  uint64_t endpoints = 0;  ///< one per communicator and NIC of its share
};
FabricCensus fabric_census();

/// Opens the endpoint `options.provider` names: "memory" (memory/memory_fabric.hpp), "unix" (unix/unix_endpoint.hpp),
/// any other name a libfabric provider. None named: libfabric's choice for the job's shape (fabric/provider_choice.hpp),
/// or "unix" where every rank is on one host and no libfabric loads. Throws FabricError where none can be opened
/// (across hosts without libfabric: what was searched and what to install), InvalidUsageError for "unix" across hosts.
std::unique_ptr<Endpoint> open_endpoint(const FabricOptions& options);

}  // namespace hiercoll::transport
