// Start-up: the constructor, the bootstrap through the store (node ids, the peer watch, the endpoint's addresses,
// the node's shared memory), the link probe, and the waits on the store that end when the peer watch reports a
// death. The rest of the communicator (queue, progress thread, failures) is communicator_impl.cpp.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "algo/algorithms.hpp"
#include "algo/background.hpp"
#include "base/limits.hpp"
#include "base/log.hpp"
#include "engine/communicator_impl.hpp"
#include "engine/schedules.hpp"
#include "hiercoll/errors.hpp"
#include "launch/environment.hpp"
#include "reduce/reduce.hpp"
#include "store/gather.hpp"
#include "topo/cpus.hpp"
#include "topo/net.hpp"

namespace hiercoll::engine {
namespace {

uint16_t context_of(const std::string& name) {
  uint32_t hash = 2166136261u;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 16777619u;
  return static_cast<uint16_t>(hash ^ (hash >> 16));
}

// Communicators made with the same name on one store get distinct key spaces: every rank makes them in the same
// order, so the k-th communicator named N that a rank makes on a store uses prefix "N#k". The count is kept in the
// store, per rank, rather than in the process: ranks may be threads of one process, and a process may make
// communicators on several stores.
std::string next_instance_name(Store& store, const std::string& name, int rank) {
  const int64_t made = store.add("hiercoll/made/" + name + "/" + std::to_string(rank), 1);
  return name + "#" + std::to_string(made - 1);
}

// A published address travels with the identity of the network it was made in (host name and network namespace),
// so that ranks can tell two hosts publishing one address from ranks of one host sharing it.
Store::Bytes with_network(const std::vector<uint8_t>& address) {
  const std::string network = topo::network_identity();
  Store::Bytes value(2 + address.size() + network.size());
  value[0] = static_cast<uint8_t>(address.size() >> 8);
  value[1] = static_cast<uint8_t>(address.size() & 0xff);
  std::copy(address.begin(), address.end(), value.begin() + 2);
  std::copy(network.begin(), network.end(), value.begin() + 2 + static_cast<long>(address.size()));
  return value;
}

std::pair<std::vector<uint8_t>, std::string> split_network(const Store::Bytes& value, int rank) {
  const size_t length = value.size() >= 2 ? (size_t{value[0]} << 8 | value[1]) : 0;
  if (value.size() < 2 || value.size() < 2 + length) {
    throw RemoteError("Communicator::create: rank " + std::to_string(rank) + "'s address record is malformed (" +
                      std::to_string(value.size()) + " bytes): a rank of another hiercoll version?");
  }
  return {std::vector<uint8_t>(value.begin() + 2, value.begin() + 2 + static_cast<long>(length)),
          std::string(value.begin() + 2 + static_cast<long>(length), value.end())};
}

void check_create(const Store* store, int rank, int size) {
  if (store == nullptr) throw InvalidUsageError("Communicator::create: store is null");
  if (size < 1 || size > algo::kMaxWorldRanks) {
    throw InvalidUsageError("Communicator::create: size " + std::to_string(size) + " is outside 1.." +
                            std::to_string(algo::kMaxWorldRanks));
  }
  if (rank < 0 || rank >= size) {
    throw InvalidUsageError("Communicator::create: rank " + std::to_string(rank) + " is outside 0.." +
                            std::to_string(size - 1));
  }
}

// What the process needs settled before its first communicator talks to anyone.
void settle_process(int rank, int size) {
  // The kernels' instruction set, the streaming threshold and the cache size are settled once per process, here
  // rather than inside the first collective that reduces: the last two come from sysfs, and reading it there made
  // that rank late for its peers, a stall the first timed call of a benchmark showed. A malformed HIERCOLL_CPU_ISA or
  // HIERCOLL_STREAM_BYTES then fails the create, not a call.
  reduce::active_isa();
  reduce::last_level_cache_bytes();
  reduce::stream_bytes();
  // Rank 0 holds a connection per rank for the peer watch, and for the store where it serves one; every rank may
  // hold one per peer on a connection-oriented provider. Raised everywhere; too few is an error where it is sure
  // to bite, on rank 0.
  const size_t own_descriptors = 256;  // the endpoint, shared memory, the provider's own, the caller's
  if (rank == 0) {
    base::require_descriptors(own_descriptors + 2 * static_cast<size_t>(size),
                              "rank 0 of " + std::to_string(size) + " ranks (a store and a peer-watch connection per "
                              "rank)");
  } else {
    base::raise_descriptor_limit();
  }
  base::set_log_rank(rank);
}

}  // namespace

CommunicatorImpl::CommunicatorImpl(std::shared_ptr<Store> store, int rank, int size, CommOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      settings_(base::Settings::from_env()),
      flight_(settings_.flight_entries),
      timeout_ms_(options_.timeout.count()) {
  check_create(store.get(), rank, size);
  // HIERCOLL_TIMEOUT_MS, when set, wins over the caller's timeout (torch's group timeout included): one limit for a
  // whole job or test run, whatever each call site asks.
  if (settings_.timeout_from_env) {
    options_.timeout = std::chrono::milliseconds(settings_.timeout_ms);
    timeout_ms_ = settings_.timeout_ms;
  }
  if (options_.timeout.count() <= 0) throw InvalidUsageError("Communicator::create: timeout must be positive");
  // A name HIERCOLL_ALGO does not take fails the create before any rank waits for another (the selector, made after
  // the bootstrap, would refuse it there).
  if (!settings_.algo.empty()) algo::forced_algorithm(settings_.algo);
  settle_process(rank, size);

  algo_config_.chunk_bytes = settings_.chunk_bytes;
  algo_config_.slots = settings_.pipeline_slots;
  cost_model_ = algo::CostModel::from(settings_);

  for (int r = 0; r < size; ++r) world_ranks_.push_back(r);
  instance_ = next_instance_name(*store, options_.name, rank);
  const std::string& instance = instance_;
  context_ = context_of(instance);
  store_ = std::make_shared<PrefixStore>("hiercoll/" + instance, std::move(store));
  try {
    bootstrap(*store_, instance);
    scheduler_.start();
    // Everyone has connected and attached once this barrier passes: the shared-memory segment's name is no longer
    // needed. Through the node's memory where the fabric opens later: it says nothing of the fabric then.
    const Schedule& barrier =
        schedule_of(deferred_ ? algo::Algorithm::kNode : algo::Algorithm::kDissemination, algo::Kind::kBarrier);
    enqueue_collective("init barrier", {static_cast<uint32_t>(algo::Kind::kBarrier)},
                       [body = barrier.host(*this, Call{})](algo::Channel& ch) { body(ch, nullptr, nullptr); })
        .wait();
    if (arena_) arena_->unlink();
    measure_link();
  } catch (...) {
    // A constructor that throws runs no destructor: the progress thread must be joined here, or destroying the
    // joinable std::thread member terminates the process instead of raising the error. The peers hear that this
    // rank aborted: they fail now rather than wait for it to the timeout.
    scheduler_.stop();
    if (watch_) watch_->leave(/*aborted=*/true);
    throw;
  }
  if (deferred_) deferred_->start();
  log_ready();
}

void CommunicatorImpl::log_ready() const {
  HIERCOLL_LOG(kInfo, "communicator '" << instance_ << "' rank " << rank_ << "/" << size_ << " ready: provider "
                                       << (deferred_ ? std::string("(opening after create)") : endpoint_->provider())
                                       << ", reduce isa " << reduce::to_string(reduce::active_isa()) << ", chunk "
                                       << algo_config_.chunk_bytes << " B x " << algo_config_.slots
                                       << " slots, node piece " << cost_model_.shm_piece_bytes << " B");
  if (rank_ == 0) {
    HIERCOLL_LOG(kInfo, "layout " << layout_.describe() << "; hierarchical allreduce "
                                  << (selector_->hierarchical_eligible() ? "available" : "unavailable"));
    HIERCOLL_LOG(kInfo, selector_->tuning_table());
    HIERCOLL_LOG(kInfo, "machine: " << detect_machine().describe());
  }
}

void CommunicatorImpl::refit_model() {
  cost_model_.net_message_bytes = algo_config_.chunk_bytes;
  if (layout_.regular()) hierarchy_.small_message_bytes = algo::crossover_bytes(cost_model_, layout_.node_count);
  selector_ =
      std::make_unique<algo::Selector>(cost_model_, layout_, selector_->hierarchical_eligible(), settings_.algo);
}

void CommunicatorImpl::measure_link() {
  // The cost model's network figures decide between the ring, recursive doubling and the hierarchical and sharded
  // schedules; configured ones (HIERCOLL_NET_*) are a guess that can be 50x off between a 1 Gbit/s link and a
  // 400 Gbit/s fabric. So the first ranks of nodes 0 and 1 measure theirs. Those set in the environment win.
  if (layout_.node_count < 2 || settings_.net_probe_bytes == 0) return;
  if (settings_.net_bw_from_env && settings_.net_lat_from_env && settings_.net_overhead_from_env) return;
  const int a = layout_.rank_at(0, 0), b = layout_.rank_at(1, 0);
  const size_t bytes = settings_.net_probe_bytes;
  algo::LinkFigures measured;
  const auto start = algo::Clock::now();
  enqueue_collective("link probe", {static_cast<uint32_t>(algo::Kind::kBarrier)}, [&](algo::Channel& ch) {
    measured = algo::probe_link(ch, a, b, bytes);
  }).wait();
  const double ms = std::chrono::duration<double, std::milli>(algo::Clock::now() - start).count();
  net_probed_ = true;
  if (!settings_.net_lat_from_env) cost_model_.net.latency_us = measured.latency_us;
  if (!settings_.net_bw_from_env) cost_model_.net.bandwidth_gbps = measured.bandwidth_gbps;
  if (!settings_.net_overhead_from_env) cost_model_.net.overhead_us = measured.overhead_us;
  // Both were made with the configured figures before the probe could run (it needs the communicator).
  refit_model();
  if (rank_ == 0) {
    HIERCOLL_LOG(kInfo, "link probe, rank " << a << " -> rank " << b << ", " << bytes << " B in " << ms
                                            << " ms: latency " << measured.latency_us << " us, bandwidth "
                                            << measured.bandwidth_gbps << " GB/s, overhead " << measured.overhead_us
                                            << " us a message; the cost model uses " << cost_model_.net.latency_us
                                            << " us, " << cost_model_.net.bandwidth_gbps << " GB/s, "
                                            << cost_model_.net.overhead_us << " us");
  }
}

void CommunicatorImpl::bootstrap(Store& store, const std::string& instance) {
  // The node identity is published first: once a rank's address is there, so is its node.
  std::string node_id = options_.node.empty() ? settings_.node_id : options_.node;
  if (node_id.empty()) node_id = topo::node_identity();
  join_watch(store, node_id);
  gather_nodes(store, node_id);
  setup_hierarchy(store, instance);
  open_fabric();
}

void CommunicatorImpl::join_watch(Store& store, const std::string& node_id) {
  PeerWatch::Options watch;
  watch.rank = rank_;
  watch.size = size_;
  watch.heartbeat_timeout = std::chrono::milliseconds(settings_.heartbeat_timeout_ms);
  watch.connect_timeout = options_.timeout;
  watch.socket_ifname = settings_.socket_ifname;
  auto report = [this](const PeerWatch::Loss& loss) {
    halt(loss.reason, base::Failure::Lost{loss.rank, loss.connection_closed}, loss.gave_up);
  };
  // The watch comes first, so that a rank dying anywhere in the rest of start-up is noticed at once (waits on the
  // store below give up when the watch reports it), not at the timeout. Rank 0 publishes the hub's contact, then its
  // node (so whoever sees node/0 and no contact knows rank 0 runs without a watch); every other rank joins the hub
  // before publishing anything: whoever has a rank's address has its death. A rank that dies before it joins is not
  // seen here (launchers end such jobs: hiercoll_launch, torchrun, mpirun).
  const bool watched = size_ > 1 && settings_.peer_watch;
  if (watched && rank_ == 0) {
    watch_ = PeerWatch::hub(watch, report);
    store.set("watch", watch_->contact());
  }
  if (rank_ == 0) store.set("node/0", node_id);
  if (watched && rank_ != 0) {
    const Store::Bytes node0 =
        store::get_waiting(store, "node/0", startup_wait(store), [] { return std::string("rank 0 never arrived"); });
    if (store.check({"watch"})) {
      const bool same_host = std::string(node0.begin(), node0.end()) == node_id;
      watch_ = PeerWatch::spoke(watch, store.get_string("watch"), same_host, report);
    } else {
      HIERCOLL_LOG(kWarn, "rank 0 runs without the peer watch (HIERCOLL_PEER_WATCH=0 there): a dead rank is noticed "
                          "at the timeout");
    }
  }
}

void CommunicatorImpl::gather_nodes(Store& store, const std::string& node_id) {
  // Every rank's node first: which NIC a rank opens depends on its local rank. With it, the rank's machine and CPUs
  // (after a NUL, which no node id holds): how many ranks share a core, for the cost model (the same on every rank),
  // and which of its node's NICs sit near each rank, for the NIC choice (nic_choice.hpp's rule 4).
  std::string record = node_id;
  record += '\0';
  record += topo::cpu_share();
  std::vector<std::string> node_ids, shares;
  for (const auto& bytes :
       store::allgather(store, "node", rank_, size_, Store::Bytes(record.begin(), record.end()), startup_wait(store))) {
    const std::string text(bytes.begin(), bytes.end());
    const size_t end = text.find('\0');
    node_ids.push_back(text.substr(0, end));
    shares.push_back(end == std::string::npos ? "" : text.substr(end + 1));
  }
  layout_ = Layout::from_node_ids(node_ids, rank_);
  for (int local = 0; local < layout_.local_size; ++local)
    local_cpu_shares_.push_back(shares[static_cast<size_t>(layout_.rank_at(layout_.node, local))]);
  cost_model_.ranks_per_cpu = topo::ranks_per_cpu(shares);
  if (settings_.shm_piece_bytes == 0 && layout_.node_count == 1) cost_model_.shm_piece_bytes = algo::kOneNodePieceBytes;
}

void CommunicatorImpl::open_fabric() {
  if (open_deferred()) {
    // Started once create is done (the constructor), so that opening costs create nothing; `store` is *store_.
    auto deferred = std::make_unique<transport::DeferredEndpoint>([this] {
      const auto start = algo::Clock::now();
      try {
        auto endpoint = open_endpoint(*store_);
        const double ms = std::chrono::duration<double, std::milli>(algo::Clock::now() - start).count();
        HIERCOLL_LOG(kInfo, "fabric opened after create: provider " << endpoint->provider() << ", NIC "
                                                                    << endpoint->domain() << ", in " << ms << " ms");
        return endpoint;
      } catch (const std::exception& e) {
        // Raised by the first operation that needs the fabric; a job that never does lives without it.
        HIERCOLL_LOG(kInfo, "the fabric did not open after create: " << e.what());
        throw;
      }
    });
    deferred_ = deferred.get();
    endpoint_ = std::move(deferred);
  } else {
    endpoint_ = open_endpoint(*store_);
    if (layout_.node_count > 1) pin_node_memory(host_memory_, true);
    fit_chunks_to_provider();
    refit_model();  // the network's messages are the chunks now fitted (the probe, if it runs, refits again)
  }
  scratch_.pin_with(endpoint_.get());
  endpoint_open_.store(true, std::memory_order_release);
}

// On one host with the provider left to hiercoll, every collective but alltoall, reduce and the flat schedules a
// user forces runs through the node's shared memory, and the fabric serves point-to-point work. Opening it is most
// of what start-up costs there (libfabric's provider scan at its first fi_getinfo, the address exchange), paid by
// every rank on the cores they share; so it opens after create, on a thread of its own, and the first operation
// that needs it waits for it (transport::DeferredEndpoint). A provider named by the job opens inside create, so that
// a wrong name or a rank that cannot speak to the others fails create, as it does between hosts.
bool CommunicatorImpl::open_deferred() const {
  return layout_.node_count == 1 && size_ > 1 && named_provider().empty() && host_memory_.peers != nullptr;
}

std::unique_ptr<transport::Endpoint> CommunicatorImpl::open_endpoint(Store& store) {
  transport::FabricOptions fabric;
  fabric.provider = named_provider();
  fabric.interface = settings_.fabric_iface;
  fabric.rendezvous_host = launch::rendezvous_host_from_env();
  fabric.local_rank = layout_.local_rank;
  fabric.local_size = layout_.local_size;
  fabric.local_cpu_shares = local_cpu_shares_;
  fabric.across_nodes = layout_.node_count > 1;
  fabric.cq_wait = settings_.fabric_cq_wait;
  fabric.force_mr = settings_.fabric_force_mr;
  fabric.rxm_buffer_bytes = static_cast<size_t>(settings_.rxm_buffer_bytes);
  fabric.rxm_rx_buffers = static_cast<size_t>(settings_.rxm_rx_buffers);
  fabric.rxd_max_unacked = static_cast<size_t>(settings_.rxd_max_unacked);
  fabric.stripe_min_bytes = static_cast<size_t>(settings_.stripe_min_bytes);
  std::unique_ptr<transport::Endpoint> endpoint = transport::open_endpoint(fabric);
  endpoint->connect(rank_, exchange_addresses(store, *endpoint));
  return endpoint;
}

std::vector<std::vector<uint8_t>> CommunicatorImpl::exchange_addresses(Store& store, transport::Endpoint& endpoint) {
  const std::vector<Store::Bytes> records =
      store::allgather(store, "addr", rank_, size_, with_network(endpoint.address()), startup_wait(store));
  std::vector<std::vector<uint8_t>> addresses;
  std::map<std::string, std::pair<int, std::string>> first_at;  // host address -> first rank publishing it, its network
  for (int r = 0; r < size_; ++r) {
    auto [address, network] = split_network(records[static_cast<size_t>(r)], r);
    const std::string host = endpoint.host_of(address);
    if (!host.empty()) {
      auto [seen, fresh] = first_at.emplace(host, std::make_pair(r, network));
      if (!fresh && seen->second.second != network) {
        // Every rank reads the same records, so every rank fails here, at once, with the same message.
        throw InvalidUsageError(
            "Communicator::create: ranks " + std::to_string(seen->second.first) + " and " + std::to_string(r) +
            " are on different hosts (" + seen->second.second + ", " + network + ") but both publish address " + host +
            ": the NIC they chose is host-only and reaches neither from the other (this rank's: " +
            endpoint.domain() + " of provider " + endpoint.provider() +
            "). Set HIERCOLL_FABRIC_IFACE to the NIC that connects the hosts (`ip -br addr`)");
      }
    }
    addresses.push_back(std::move(address));
  }
  return addresses;
}

store::StartupWait CommunicatorImpl::startup_wait(Store& store) {
  store::StartupWait wait;
  wait.deadline = algo::Clock::now() + options_.timeout;
  // Slices only so that a death the peer watch reports ends the wait between them; without the watch nothing can
  // end it early: one read, held by the server, for all of the time left.
  wait.first_slice = watch_ ? std::chrono::milliseconds(50) : options_.timeout;
  wait.stop = [this, &store](const std::vector<std::string>& keys, const std::function<std::string()>& missing) {
    fail_if_halted(store, keys, missing);
  };
  wait.timeout_context =
      "within " + std::to_string(options_.timeout.count()) + " ms (communicator '" + options_.name + "')";
  return wait;
}

void CommunicatorImpl::fail_if_halted(Store& store, const std::vector<std::string>& keys,
                                      const std::function<std::string()>& missing) {
  if (!halted_.halted()) return;
  base::Failure failure{ErrorCode::kRemoteError, {}};
  halted_.explain(failure, "Communicator::create", watch_ != nullptr);
  // A rank that gave up (alive, it aborted) most likely timed out on a rank that never arrived, which this rank
  // is still waiting for too: then that is the failure here as well, a timeout naming the missing, whichever
  // rank's clock ran out first (start-up under load staggers them by seconds). A rank that died is the failure.
  try {
    if (!store.check(keys)) {
      const std::string absent = missing();
      if (halted_.peer_gave_up()) {
        failure.code = ErrorCode::kTimeout;
        failure.lost.reset();
        failure.message = "Communicator::create: " + absent + " (communicator '" + options_.name + "'); " +
                          halted_.reason().message + ", before this rank's own " +
                          std::to_string(options_.timeout.count()) + " ms ran out";
      } else {
        failure.message += "; still waiting here: " + absent;
      }
    }
  } catch (const Error&) {  // the store went with the rank that served it
  }
  base::throw_failure(failure);
}

// Start-up's exchange, at O(N) requests to the store's server (one process's thread, rank 0's with hiercoll's own
// store): every other rank publishes its record, rank 0 reads them in rank order, each read held by the server
// until the record is there (no polling), and publishes them as one value, which every other rank reads once. Each
// rank makes two requests and rank 0 2N; the N records travel twice. Reading all N keys on every rank instead made
// N^2 requests, and their polls more, to one thread: over 2 million before the first collective at 1,024 ranks.
void CommunicatorImpl::fit_chunks_to_provider() {
  // Over RxM a message above the eager size waits for a handshake whose control messages share one TCP connection
  // with the bulk data flowing the other way, so a pair exchanging both ways (a 2-node ring, the rails of the
  // hierarchical allreduce, the sharded servers) gets part of the link only (`git log -S fit_chunks_to_provider`
  // has the figures). On one node no link is shared and large messages cost less CPU, so only between
  // nodes, and never over a user's HIERCOLL_CHUNK_BYTES. The bytes in flight stay as they were.
  const size_t eager = endpoint_->eager_bytes();
  if (eager == 0 || layout_.node_count < 2 || settings_.chunk_from_env || eager >= algo_config_.chunk_bytes) return;
  const size_t in_flight = algo_config_.chunk_bytes * static_cast<size_t>(algo_config_.slots);
  algo_config_.chunk_bytes = eager;
  if (!settings_.slots_from_env) algo_config_.slots = static_cast<int>(std::max<size_t>(1, in_flight / eager));
}

void CommunicatorImpl::setup_hierarchy(Store& store, const std::string& instance) {
  host_memory_.queue = &host_queue_;
  // A rank waiting on a node flag spins before it sleeps. Where ranks outnumber the cores they share, its first
  // polls without yielding hold the core the awaited peer, or another node's rank on the same machine, needs. Where
  // each rank has a core, yields only delay noticing the flag. The machine's ranks count, not only the node's:
  // nodes that are containers or network namespaces of one machine share its cores (ranks_per_cpu, from every
  // rank's boot id and CPUs).
  const int cpus = topo::cpus_for_local_ranks();
  const bool crowded = layout_.local_size > cpus || cost_model_.ranks_per_cpu > 1.0;
  const bool yield = settings_.spin_yield == "auto" ? crowded : settings_.spin_yield == "1";
  host_queue_.set_yield(yield);
  if (rank_ == 0) {
    HIERCOLL_LOG(kInfo, "node flag waits " << (yield ? "yield the core while they spin" : "spin without yielding")
                                           << " (" << layout_.local_size << " local ranks, " << cpus << " CPUs, "
                                           << cost_model_.ranks_per_cpu << " ranks per CPU on the busiest machine, "
                                           << "HIERCOLL_SPIN_YIELD=" << settings_.spin_yield << ")");
  }
  hierarchy_.local_rank = layout_.local_rank;
  hierarchy_.local_size = layout_.local_size;
  hierarchy_.cached_output_bytes = reduce::last_level_cache_bytes();
  hierarchy_.node = layout_.node;
  bool ready = layout_.regular() && layout_.local_size > 1;
  if (layout_.regular()) {
    for (int n = 0; n < layout_.node_count; ++n) hierarchy_.rail.push_back(layout_.rank_at(n, layout_.local_rank));
    hierarchy_.small_message_bytes = algo::crossover_bytes(cost_model_, layout_.node_count);
  }
  if (ready) {
    transport::sweep_stale_segments();
    const std::string key = "shm/" + std::to_string(layout_.node);
    const int buffers = algo::kHierBufferSets;
    if (layout_.local_rank == 0) {
      char tag[64];
      std::snprintf(tag, sizeof(tag), "%04x-%d", context_of(instance), layout_.node);
      arena_ = transport::NodeArena::create(tag, layout_.local_size, buffers, cost_model_.shm_piece_bytes);
      store.set(key, arena_->name());
    } else {
      const std::string maker = "rank " + std::to_string(layout_.rank_at(layout_.node, 0)) + " (local rank 0 of node " +
                                std::to_string(layout_.node) + ", which makes the node's shared memory)";
      const Store::Bytes name = store::get_waiting(
          store, key, startup_wait(store), [&] { return maker + " did not publish it: dead, or stuck in start-up"; });
      try {
        arena_ = transport::NodeArena::attach(std::string(name.begin(), name.end()), layout_.local_rank,
                                              layout_.local_size, buffers, cost_model_.shm_piece_bytes);
      } catch (const RemoteError& e) {
        throw RemoteError("Communicator::create: " + maker + " died after publishing it: " + e.what());
      }
    }
    host_memory_.peers = arena_.get();
    // Not where the node's ranks outnumber its cores: there each rank's reads of every peer cost more than the
    // staged rounds (docs/experiments.md, "Single copies through cross-memory attach").
    host_memory_.direct_bytes = layout_.local_size > cpus ? 0 : settings_.cma_bytes;
    // From every rank's CPUs (gathered at start-up), so that all local ranks agree: ranks that disagreed would read
    // each other's data at different offsets.
    host_memory_.rotate = cost_model_.ranks_per_cpu <= 1.0;
    if (settings_.net_staging && layout_.node_count > 1) {
      // The inter-node phase works on buffers of ours rather than on the caller's: on providers that register
      // memory (EFA), these are registered once instead of every caller buffer. It is the device path's flow.
      const size_t bytes = algo::network_staging_bytes(cost_model_.shm_piece_bytes, layout_.local_size);
      for (int s = 0; s < algo::kHierBufferSets; ++s) {
        host_staging_[s].assign((bytes + 7) / 8, 0);
        host_memory_.network_staging[s] = reinterpret_cast<uint8_t*>(host_staging_[s].data());
      }
    }
    network_worker_ = std::make_unique<algo::BackgroundWorker>();
    hierarchy_.network = network_worker_.get();
  }
  selector_ = std::make_unique<algo::Selector>(cost_model_, layout_, ready, settings_.algo);
}

}  // namespace hiercoll::engine
