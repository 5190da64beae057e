#pragma once
// The engine behind hiercoll::Communicator, a communicator of parts: its scheduler (scheduler.hpp: one progress
// thread owns the endpoint and runs operations in issue order, point-to-point requests complete beside them, a small
// one-node collective may run on its caller's thread instead when it is next in line), its halt and failure state
// (halt.hpp), and what it knows of its ranks, nodes and memory, made at start-up (startup.cpp).
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algo/agreement.hpp"
#include "algo/background.hpp"
#include "algo/channel.hpp"
#include "algo/hierarchy.hpp"
#include "algo/select.hpp"
#include "base/settings.hpp"
#include "device/host_queue.hpp"
#include "engine/collective.hpp"
#include "engine/halt.hpp"
#include "engine/scheduler.hpp"
#include "engine/work_state.hpp"
#include "gpu/device_path.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/topology.hpp"
#include "record/flight_recorder.hpp"
#include "store/gather.hpp"
#include "transport/deferred_endpoint.hpp"
#include "transport/shm/node_arena.hpp"
#include "transport/transport.hpp"
#include "watch/peer_watch.hpp"

namespace hiercoll::engine {

using watch::PeerWatch;

std::string describe_op(const algo::OpDescriptor& descriptor);

struct Call;      // schedules.hpp
struct Schedule;  // schedules.hpp

class CommunicatorImpl : private Scheduler::Owner {
 public:
  CommunicatorImpl(std::shared_ptr<Store> store, int rank, int size, CommOptions options);
  ~CommunicatorImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Validates a collective, chooses its algorithm and enqueues it (collective.cpp): every collective call's path.
  Work collective(const Collective& c);
  /// Runs `body` on the progress thread with a Channel over all ranks. `what` names it in errors;
  /// `descriptor` is what ranks compare first when the mismatch check is on. In a communicator of one rank the
  /// caller's thread runs it instead when the progress thread is idle with nothing queued or pending (run_here),
  /// and the Work it returns is finished.
  Work enqueue_collective(std::string what, const algo::OpDescriptor& descriptor,
                          std::function<void(algo::Channel&)> body);
  /// Issues an operation's device work on the caller's thread (see gpu/device_path.hpp) and returns its host half
  /// (run later by the progress thread on the operation's channel), or null if it has none.
  using DeviceIssue = std::function<algo::NetworkStage::Job(const algo::OpContext&, gpu::DevicePath&)>;
  /// The same for device buffers on `device`, ordered after `stream`: `issue` runs now, on this thread; the
  /// operation completes once the device ran its work and the progress thread its host half.
  Work enqueue_device_collective(std::string what, const algo::OpDescriptor& descriptor, int device,
                                 gpu::StreamHandle stream, DeviceIssue issue);
  /// A collective of a one-rank communicator on device buffers: `bytes` of `in` copied to `out` on the caller's
  /// `stream` itself (nothing in place); its Work learns from the device when it ends (WorkState::device_end).
  Work enqueue_device_alone(const record::CollectiveName& name, int device, gpu::StreamHandle stream, void* out,
                            const void* in, size_t bytes);
  /// The node's CUDA IPC peer memory (made at the first call, by all local ranks together); caller's thread, in
  /// a DeviceIssue.
  algo::NodeMemory& device_node_memory(const algo::OpContext& issue, gpu::DevicePath& path);
  /// Pins (Endpoint::pin) what of `memory` the network phase sends from or receives into, for the communicator's
  /// life: this rank's shared areas where `areas` (host memory; a device path's are GPU memory, which the network
  /// reaches through the staging buffers), and the network staging buffers. Driver thread.
  void pin_node_memory(const algo::NodeMemory& memory, bool areas);
  /// Posts a point-to-point request on the progress thread; the Work completes with the request.
  Work enqueue_p2p(std::string what, int peer, std::function<transport::RequestPtr(transport::Endpoint&)> post);

  void abort();
  void on_failure(Communicator::FailureCallback callback) { halted_.on_failure(std::move(callback)); }
  /// Applies to operations the progress thread starts from now on.
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(timeout_ms_.load()); }
  algo::Algorithm choose_allreduce(size_t bytes, bool device = false) const {
    return device ? selector_->choose_for_device(bytes) : selector_->choose(bytes);
  }
  uint16_t context() const { return context_; }
  const Layout& layout() const { return layout_; }
  Tuning tuning() const {
    Tuning t;
    t.net_latency_us = cost_model_.net.latency_us;
    t.net_bandwidth_gbps = cost_model_.net.bandwidth_gbps;
    t.net_probed = net_probed_;
    t.chunk_bytes = algo_config_.chunk_bytes;
    t.pipeline_slots = algo_config_.slots;
    t.node_piece_bytes = cost_model_.shm_piece_bytes;
    t.net_overhead_us = cost_model_.net.overhead_us;
    t.ranks_per_cpu = cost_model_.ranks_per_cpu;
    t.flag_waits_yield = host_queue_.yields();
    return t;
  }
  std::string fabric_nic() const { return endpoint_->domain(); }
  transport::Endpoint::Stats fabric_stats() const { return endpoint_->stats(); }
  /// The flight recorder's JSON (see flight_recorder.hpp).
  std::string flight_record() const { return flight_.json(instance_, rank_, size_); }
  algo::Hierarchy& hierarchy() { return hierarchy_; }
  algo::NodeMemory& host_memory() { return host_memory_; }
  /// Whether the layout has node structure for the hierarchical schedules (regular, several ranks per node).
  bool hierarchical_eligible() const { return selector_->hierarchical_eligible(); }

 private:
  // Scheduler::Owner: what the scheduler asks of the communicator.
  std::optional<base::Failure> run_op(Scheduler::Op& op) override;
  transport::Endpoint& endpoint() override { return *endpoint_; }
  base::Failure halt_reason() override { return halted_.reason(); }
  [[noreturn]] void throw_stopped(const std::string& what) override { halted_.throw_stopped(what); }
  uint64_t record_queued(const std::string& what) override { return flight_.queued(what); }

  /// Start-up, in order: the peer watch, every rank's node and CPUs (the layout), the node's memory, the fabric.
  /// `store` is *store_.
  void bootstrap(Store& store, const std::string& instance);
  void join_watch(Store& store, const std::string& node_id);
  void gather_nodes(Store& store, const std::string& node_id);
  /// Opens the endpoint now, or hands the opening to a DeferredEndpoint (open_deferred).
  void open_fabric();
  void log_ready() const;
  /// Opens the endpoint on this rank's NIC, which the layout decides (local rank l takes rail l), and connects it to
  /// every rank's: after the node ids. Runs in bootstrap(), or on the DeferredEndpoint's thread (open_deferred).
  std::unique_ptr<transport::Endpoint> open_endpoint(Store& store);
  /// Whether the endpoint opens after create, in the background (see the definition).
  bool open_deferred() const;
  /// The provider the job named (CommOptions::provider, else HIERCOLL_FABRIC_PROVIDER); "" leaves it to hiercoll.
  const std::string& named_provider() const {
    return options_.provider.empty() ? settings_.fabric_provider : options_.provider;
  }
  /// Every rank's endpoint address, gathered; fails at once where two hosts publish one address (a host-only
  /// interface such as docker0 chosen on both), which no rank could reach the other through.
  std::vector<std::vector<uint8_t>> exchange_addresses(Store& store, transport::Endpoint& endpoint);
  void setup_hierarchy(Store& store, const std::string& instance);
  /// How start-up waits on the store (store/gather.hpp): within the communicator's timeout, ended early when the
  /// peer watch has reported a lost rank (fail_if_halted), in slices where there is a watch to report one.
  store::StartupWait startup_wait(Store& store);
  /// Throws the failure the peer watch reported, if any; a rank that gave up most likely timed out waiting for
  /// the same `keys` as this one, and then the failure is that timeout, naming `missing()`.
  void fail_if_halted(Store& store, const std::vector<std::string>& keys, const std::function<std::string()>& missing);
  /// Network messages no larger than the provider's eager size, between nodes, unless HIERCOLL_CHUNK_BYTES says.
  void fit_chunks_to_provider();
  /// The start-up link probe (algo::probe_link) between nodes 0 and 1; its figures replace the cost model's
  /// configured ones, except those set in the environment.
  void measure_link();
  /// The cost model's figures changed (the provider's chunk, the probe's): the selector and the rails' crossover are
  /// made again from them. Start-up only, before the first collective is issued.
  void refit_model();
  static constexpr std::chrono::milliseconds kQuiesceLimit{1000};
  /// Operation `what` failed on this rank, whichever thread ran it (run_op, run_here): the failure is explained
  /// (HaltState::explain; a collective's also by on_collective_failure), then the communicator breaks on it
  /// (break_on).
  void fail(base::Failure& failure, const std::string& what, bool collective);
  /// A collective failed: a timeout's message learns which ranks are behind; the record is written out if asked.
  void on_collective_failure(base::Failure& failure);
  /// The device path for buffers on `device`, made at the first call; under device_mutex_. `what` names the call
  /// in the error when the communicator's device buffers live on another device.
  std::shared_ptr<gpu::DevicePath> device_path(int device, const char* what);
  /// The channel of the collective about to run on the progress thread: next sequence number, deadline from now.
  algo::Channel next_channel(const std::string& what);
  /// A collective of host buffers up to 1 MB that only node memory carries (a one-node allreduce, the node
  /// reduce-scatter, allgather, broadcast and barrier), on the caller's thread (collective.cpp): if the progress
  /// thread is idle with nothing queued, runs `schedule.on_caller` now and returns its finished Work; otherwise
  /// nullopt, and it is enqueued.
  std::optional<Work> run_here(const Collective& c, algo::Algorithm algorithm, const Schedule& schedule,
                               const Call& call);
  /// A collective of host buffers on a communicator of one rank, on the caller's thread under the same rule: `bytes`
  /// of `in` copied to `out` (nothing in place), recorded; its finished Work, or nullopt if it must be enqueued.
  std::optional<Work> run_alone_here(const record::CollectiveName& name, void* out, const void* in, size_t bytes);
  /// After operation `what` failed with `failure`: later operations fail with it (a PeerLostError stays one);
  /// pending requests are cancelled.
  void break_on(const std::string& what, const base::Failure& failure);
  /// Every wait gives up and every later operation fails, with `reason` (the first one given): abort(), or the
  /// peer watch reporting a rank that died (any thread), which it names in `lost`; `peer_gave_up`: that rank is
  /// alive and failed for a reason of its own.
  void halt(const std::string& reason, std::optional<base::Failure::Lost> lost = std::nullopt,
            bool peer_gave_up = false);

  int rank_, size_;
  CommOptions options_;
  const base::Settings settings_;  // every knob, read once when the communicator is made
  std::string instance_;           // "name#k": this communicator among those of its name
  record::FlightRecorder flight_;
  uint16_t context_ = 0;
  uint16_t sequence_ = 0;
  algo::AlgoConfig algo_config_;
  algo::CostModel cost_model_;
  bool net_probed_ = false;  // measure_link() ran the probe
  std::unique_ptr<algo::Selector> selector_;
  Layout layout_;
  std::vector<std::string> local_cpu_shares_;  // topo::cpu_share() of this node's ranks, by local rank (NIC choice)
  std::unique_ptr<transport::NodeArena> arena_;
  std::unique_ptr<algo::BackgroundWorker> network_worker_;
  algo::Hierarchy hierarchy_;
  device::HostQueue host_queue_;
  algo::NodeMemory host_memory_;                               // shared memory through arena_, for host buffers
  std::vector<uint64_t> host_staging_[algo::kHierBufferSets];  // HIERCOLL_NET_STAGING=1
  std::mutex device_mutex_;  // one issuer of device work at a time; guards device_tickets_ and writes of device_
  std::shared_ptr<gpu::DevicePath> device_;  // made at the first device-buffer call; abort() reads it with atomic_load
  uint64_t device_tickets_ = 0;
  std::vector<int> world_ranks_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<transport::Endpoint> endpoint_;  // opened in bootstrap(), once the layout is known
  transport::DeferredEndpoint* deferred_ = nullptr;  // endpoint_, where it opens after create (open_deferred())
  std::atomic<bool> endpoint_open_{false};         // halt() (the peer watch's thread) may wake it from then on
  algo::Scratch scratch_;
  // Registrations of the node's memory that the network phase reads and writes (its shared areas, the staging
  // buffers), held for their life: pin_node_memory(). Released before the endpoint closes and before the memory goes.
  std::vector<std::shared_ptr<const void>> node_pins_;
  bool device_memory_pinned_ = false;  // the device path's staging buffers, pinned at their first use

  // Why it halted and who was told (abort(), a peer's loss, the on_failure callback): halt.hpp. Before watch_,
  // whose thread reports into it, so that it outlives the watch.
  HaltState halted_;
  std::unique_ptr<PeerWatch> watch_;  // made in bootstrap(); reports into halt()
  // options_.timeout until set_timeout(): read by the progress thread for each operation it starts.
  std::atomic<int64_t> timeout_ms_;
  // The first fatal error; later operations fail with it (whoever runs operations: see above).
  std::optional<base::Failure> broken_;
  // Last: its progress thread runs operations on everything above, and stops before any of it goes.
  Scheduler scheduler_{*this, halted_.aborted(), settings_.caller_thread};
};

}  // namespace hiercoll::engine
