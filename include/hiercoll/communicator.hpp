#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "hiercoll/errors.hpp"
#include "hiercoll/export.hpp"
#include "hiercoll/store.hpp"
#include "hiercoll/topology.hpp"
#include "hiercoll/types.hpp"

namespace hiercoll {

namespace engine {
struct WorkState;
class CommunicatorImpl;
}  // namespace engine

/// Handle to one asynchronous operation. Cheap to copy; all copies share the operation.
class HIERCOLL_API Work {
 public:
  Work() = default;
  /// True once the operation finished, successfully or not. Never blocks.
  bool is_completed() const;
  /// Host buffers: blocks until the operation finishes and rethrows its error, if any; throws TimeoutError if it
  /// has not finished after `timeout` (the operation itself goes on).
  /// Device buffers (like ProcessGroupNCCL's wait): does not block the host. If the operation already finished it
  /// rethrows its error, if any; otherwise it makes the stream the operation was issued on wait, on the device,
  /// until the result is in place (bounded by the communicator's timeout), and returns. An error found later
  /// shows in error() / is_completed() and breaks the communicator; wait_for() blocks the host.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  /// Blocks the host until the operation finished, for host and device buffers alike, and rethrows its error;
  /// TimeoutError after `timeout` (the operation goes on).
  void synchronize(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  /// Waits up to `timeout` for the operation to finish; true if it did (successfully or not). Never throws.
  bool wait_for(std::chrono::microseconds timeout) const;
  /// The error the operation ended with, or null. Only meaningful once is_completed().
  std::exception_ptr error() const;
  /// For a receive that completed successfully: the rank the message came from (what a recv from kAnySource
  /// needs to know); -1 for every other operation or before completion.
  int source() const;
  /// Runs `callback` once the operation finished, successfully or not (for device buffers: once the result is in
  /// device memory, as is_completed() says). If it has already, the callback runs at once on this thread;
  /// otherwise on the thread that finishes the operation, the communicator's progress thread, which every later
  /// operation waits for: the callback should only hand the news on (signal, queue) and must not block, throw or
  /// call into a communicator. Several callbacks run in the order they were added.
  void on_completion(std::function<void()> callback) const;

  explicit Work(std::shared_ptr<engine::WorkState> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<engine::WorkState> state_;
};

/// Settings fixed when a communicator is made. The communicator reads the environment knobs (docs/tuning.md) once,
/// when it is made: HIERCOLL_TIMEOUT_MS replaces `timeout`, HIERCOLL_FABRIC_PROVIDER fills an empty `provider`.
struct HIERCOLL_API CommOptions {
  /// How long any collective may wait for a peer before failing with TimeoutError. HIERCOLL_TIMEOUT_MS, when set,
  /// replaces it (whatever the caller passes).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// Distinguishes communicators sharing one store. Every rank must pass the same name.
  std::string name = "world";
  /// libfabric provider ("tcp", "shm", "efa", ...); empty: HIERCOLL_FABRIC_PROVIDER, else shm where every rank is on
  /// one host (up to 256 of them), else efa if present, else tcp.
  /// "memory" is hiercoll's own in-process fabric: every rank a thread of this process (tests, emulated scale).
  std::string provider;
  /// The node this rank runs on: ranks naming the same node share memory and make up the hierarchy's first level.
  /// Empty: HIERCOLL_NODE_ID, else the host name. Ranks of one node must be on one host.
  std::string node;

  /// The options the environment gives (HIERCOLL_TIMEOUT_MS, HIERCOLL_FABRIC_PROVIDER), for callers that show or
  /// adjust them; a communicator made with default options ends up with the same.
  static CommOptions from_env();
};

/// Per-call settings.
struct HIERCOLL_API CallOptions {
  /// For device (CUDA) buffers, the cudaStream_t the collective is ordered on, as NCCL's stream argument: it reads
  /// its input after the work enqueued on this stream so far, and Work::wait() makes the stream's later work wait
  /// for its result. nullptr is the legacy default stream. Capturing streams (CUDA graphs) are refused.
  /// Ignored for host buffers.
  void* stream = nullptr;
};

/// A group of `size` processes that run collectives together, like an NCCL communicator.
///
/// Every rank must issue the same collectives in the same order. Calls return at once with a Work;
/// operations run in issue order on the communicator's progress thread. Buffers must stay valid
/// and untouched until the Work completes. Out-of-place and in-place (input == output) are both allowed.
/// Buffers are host memory or, in builds with CUDA (HIERCOLL_WITH_CUDA), CUDA device memory, told apart by
/// their address; a call's buffers are all of one kind (and one device), every rank passes the same kind, and
/// a communicator's device buffers all live on one device. Device collectives follow CallOptions::stream.
/// After an operation fails with a timeout or a peer error, the communicator is broken: later
/// operations fail at once, and the caller should abort() it and create a new one.
/// What a communicator settled at create that decides its schedules (Communicator::tuning()): the cost model's
/// network figures and the pipelines' granularity. The same on every rank.
struct HIERCOLL_API Tuning {
  /// The cost model's network: measured by the start-up link probe between nodes 0 and 1 (net_probed), else
  /// HIERCOLL_NET_LAT_US / HIERCOLL_NET_BW_GBPS, else their defaults; a figure set in the environment wins.
  double net_latency_us = 0;
  double net_bandwidth_gbps = 0;
  bool net_probed = false;  ///< the probe ran: several nodes, HIERCOLL_NET_PROBE_BYTES > 0, a figure left to measure
  size_t chunk_bytes = 0;   ///< the ring and chain pipelines' network message (HIERCOLL_CHUNK_BYTES, fitted to RxM)
  int pipeline_slots = 0;   ///< their messages in flight (HIERCOLL_PIPELINE_SLOTS, scaled with the chunk)
  size_t node_piece_bytes = 0;  ///< one piece of the node's shared memory (HIERCOLL_SHM_PIECE_BYTES)
  /// The CPU a rank spends on each message it sends or receives: measured by the link probe, else
  /// HIERCOLL_NET_OVERHEAD_US or its default, as the network figures above.
  double net_overhead_us = 0;
  /// The most ranks that share one rank's CPUs, per CPU, over all ranks (the same on every rank; below 1 where
  /// ranks have more than a core each): what the cost model multiplies each message's overhead by (at least 1).
  double ranks_per_cpu = 0;
  /// Whether a rank waiting on a node flag gives its core up at every poll while it spins (HIERCOLL_SPIN_YIELD;
  /// by default where ranks outnumber the CPUs they share: the node's, or the machine's across the nodes on it).
  bool flag_waits_yield = false;
};

class HIERCOLL_API Communicator {
 public:
  /// Joins the group through `store` (all ranks pass stores reaching the same keys). Blocks until every
  /// rank arrived; a rank that never does makes it throw TimeoutError naming that rank.
  static Communicator create(std::shared_ptr<Store> store, int rank, int size,
                             CommOptions options = {});

  /// Rank, size and store from the environment: HIERCOLL_RANK/HIERCOLL_WORLD_SIZE, torchrun's RANK/WORLD_SIZE or
  /// Open MPI's OMPI_COMM_WORLD_RANK/SIZE; the store from HIERCOLL_STORE (tcp://host:port or file:///dir), else
  /// MASTER_ADDR/MASTER_PORT, else (under mpirun) a file store in /tmp named after the MPI job.
  static Communicator from_env(CommOptions options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  /// Waits for pending operations (each bounded by the timeout), then releases the endpoint.
  ~Communicator();

  int rank() const;
  int size() const;

  /// out[i] = op over ranks of in[i], count elements on every rank.
  Work allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, const CallOptions& options = {});
  /// Rank r receives the reduction of elements [r*recv_count, (r+1)*recv_count) of every rank's input.
  Work reduce_scatter(const void* in, void* out, size_t recv_count, DataType type, ReduceOp op,
                      const CallOptions& options = {});
  /// out holds size()*send_count elements: rank r's input at offset r*send_count.
  Work allgather(const void* in, void* out, size_t send_count, DataType type, const CallOptions& options = {});
  /// root's `in` reaches every rank's `out` (root may pass in == out; others' `in` is ignored).
  Work broadcast(const void* in, void* out, size_t count, DataType type, int root, const CallOptions& options = {});
  /// The reduction reaches root's `out` only; other ranks' `out` is not written.
  Work reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root,
              const CallOptions& options = {});
  /// Block j of `in` (count_per_rank elements) goes to rank j; block i of `out` comes from rank i.
  Work alltoall(const void* in, void* out, size_t count_per_rank, DataType type, const CallOptions& options = {});
  Work barrier();
  /// Point-to-point. A send matches the recv on `peer` with the same tag; pairs of the same tag match in order.
  /// Unlike collectives, send/recv run concurrently with later operations, so a send then recv pair on both
  /// sides cannot deadlock.
  Work send(const void* buf, size_t count, DataType type, int peer, uint32_t tag = 0);
  /// `peer` may be kAnySource: the first message of this tag from any rank; Work::source() says whose it was.
  Work recv(void* buf, size_t count, DataType type, int peer, uint32_t tag = 0);
  static constexpr int kAnySource = -1;

  /// True if this build takes CUDA device buffers (HIERCOLL_WITH_CUDA); without, device pointers are not
  /// recognised and must be staged through host memory by the caller.
  static bool device_buffers_supported();

  /// Fails every pending operation and closes the endpoint without waiting for peers.
  void abort();
  /// Replaces CommOptions::timeout for the operations issued from now on (as c10d's setTimeout).
  void set_timeout(std::chrono::milliseconds timeout);
  /// Told once when the communicator breaks for a reason other than this process's own abort(): an operation of
  /// this rank failed in a way that leaves it unusable (a collective's timeout or error), or a peer died, aborted or
  /// went silent. A communicator that broke before the callback was set tells it at once, on the setting thread.
  /// It runs on one of hiercoll's threads (the progress thread, the peer watch's, a caller's), before the failed
  /// operations complete: it must return soon, and must not call into this communicator. Setting an empty callback
  /// waits for a call in progress to return; none comes after. For failure watches (torch's abort hooks: a rank with
  /// nothing in flight still learns that the job failed).
  using FailureCallback = std::function<void(ErrorCode code, const std::string& reason)>;
  void on_failure(FailureCallback callback);
  /// Name of the algorithm that allreduce of `bytes` will use: "ring", "rd", "hier" or "sharded" (on device
  /// buffers "hier" and "sharded" run their intra-node phases on the GPUs, the others on a staged host copy).
  std::string allreduce_algorithm(size_t bytes, bool device_buffers = false) const;
  /// Which ranks share a node (HIERCOLL_NODE_ID overrides the host name as node identity).
  const Layout& layout() const;
  /// The figures and sizes this communicator's schedules were chosen with (see Tuning).
  Tuning tuning() const;
  /// The NIC (libfabric domain) this rank's network endpoint runs on, e.g. "eth1" or "rdmap16s27-rdm", or its NICs
  /// comma-separated where it stripes over several (docs/design.md, "Which NIC" and "Striping").
  std::string fabric_nic() const;
  /// Counters of this rank's network endpoint since create (registrations: of its NICs' domains, which the process's
  /// communicators share). Thread-safe.
  struct FabricStats {
    /// Memory registrations made, and held now (the communicator's own buffers, and those of the operations
    /// running), where the provider registers memory (EFA, verbs, or HIERCOLL_FABRIC_FORCE_MR=1); zero elsewhere.
    uint64_t registrations_made = 0;
    uint64_t registrations_held = 0;
    /// Peers' addresses given to the provider (on EFA each is an address handle on the NIC): one per peer this rank
    /// has sent to, not one per rank of the job.
    uint64_t addresses_inserted = 0;
    /// libfabric objects open in this process, every communicator's together: one fabric per provider and one domain
    /// per NIC in use, shared by the communicators (docs/design.md, "One domain per NIC"); an endpoint per
    /// communicator and NIC of its share.
    uint64_t process_fabrics = 0;
    uint64_t process_domains = 0;
    uint64_t process_endpoints = 0;
  };
  FabricStats fabric_stats() const;
  /// The flight recorder: this rank's last collectives (HIERCOLL_FLIGHT_ENTRIES of them) as a JSON object with
  /// sequence number, operation, state (queued, running, done, failed), the thread that ran it ("caller": the
  /// calling thread, as small node-local collectives are run; "progress": the communicator's progress thread) and
  /// wall-clock times in microseconds.
  /// Thread-safe; for finding which rank is behind when a job hangs (tools/flight-report merges ranks' records).
  std::string flight_record() const;

 private:
  explicit Communicator(std::unique_ptr<engine::CommunicatorImpl> impl);
  std::unique_ptr<engine::CommunicatorImpl> impl_;
};

}  // namespace hiercoll
