#pragma once
// Every tuning knob of hiercoll in one place: its variable, default and meaning are declared once (knobs(), the
// list docs/tuning.md documents; a test checks the two agree) and read from the environment in one function,
// Settings::from_env. A communicator reads them when it is made and passes them down; nothing below asks the
// environment. HIERCOLL_DEBUG, HIERCOLL_CPU_ISA, HIERCOLL_STREAM_BYTES and HIERCOLL_LIBFABRIC are process-wide
// (logging, the kernel table and the loaded libfabric exist before any communicator): process_settings() reads them
// once per process.
//
// The launch environment (rank, size and rendezvous from torchrun, mpirun, Slurm: RANK, MASTER_ADDR, ...) is not a
// setting: lib/launch reads it (launch/environment.cpp).
#include <cstdint>
#include <string>
#include <vector>

namespace hiercoll::base {

struct Knob {
  const char* name;
  const char* fallback;  ///< the default, as text parsed like the variable; "" where the default is computed
};

/// The knobs of Settings, in docs/tuning.md's order.
const std::vector<Knob>& knobs();

struct Settings {
  std::string debug;               ///< HIERCOLL_DEBUG: VERSION, WARN, INFO, DETAIL (INFO + mismatch check), TRACE
  bool check_collectives = false;  ///< HIERCOLL_CHECK_COLLECTIVES, or HIERCOLL_DEBUG=DETAIL
  std::string algo;                ///< HIERCOLL_ALGO: "" (cost model) or a name algo::forced_algorithm takes
  std::string node_id;             ///< HIERCOLL_NODE_ID: "" means the host name
  double net_bw_gbps = 0, net_lat_us = 0, shm_bw_gbps = 0, shm_lat_us = 0;  ///< cost-model figures
  double net_overhead_us = 0;  ///< HIERCOLL_NET_OVERHEAD_US: cost model's CPU time per message sent or received
  bool net_bw_from_env = false, net_lat_from_env = false;  ///< whether set (else the link probe's figures are used)
  bool net_overhead_from_env = false;
  uint64_t net_probe_bytes = 0;   ///< HIERCOLL_NET_PROBE_BYTES: streamed by the start-up link probe; 0: no probe
  uint64_t shm_piece_bytes = 0;   ///< HIERCOLL_SHM_PIECE_BYTES; 0: by the layout (engine)
  bool net_staging = false;       ///< HIERCOLL_NET_STAGING
  bool caller_thread = true;      ///< HIERCOLL_CALLER_THREAD: small one-node collectives may run on the caller's thread
  std::string spin_yield;         ///< HIERCOLL_SPIN_YIELD: auto, 0 or 1 (node flag waits yield the core while spinning)
  uint64_t cma_bytes = 0;         ///< HIERCOLL_CMA_BYTES: single-copy node allgather/broadcast from this size; 0: never
  uint64_t cuda_piece_bytes = 0;  ///< HIERCOLL_CUDA_PIECE_BYTES
  uint64_t chunk_bytes = 0;       ///< HIERCOLL_CHUNK_BYTES
  int pipeline_slots = 0;         ///< HIERCOLL_PIPELINE_SLOTS
  bool chunk_from_env = false, slots_from_env = false;  ///< whether those two were set (else they may adapt)
  int64_t timeout_ms = 0;                               ///< HIERCOLL_TIMEOUT_MS
  bool timeout_from_env = false;  ///< whether HIERCOLL_TIMEOUT_MS was set (it then overrides a caller's timeout)
  bool peer_watch = true;         ///< HIERCOLL_PEER_WATCH: dead ranks noticed at once (watch/peer_watch.hpp)
  int64_t heartbeat_timeout_ms = 0;  ///< HIERCOLL_HEARTBEAT_TIMEOUT_MS: a rank unheard this long is dead; 0: never
  std::string fabric_provider;    ///< HIERCOLL_FABRIC_PROVIDER: "": shm on one host, else efa, else tcp
  std::string fabric_iface;       ///< HIERCOLL_FABRIC_IFACE: NICs to choose among; "" means the rule (nic_choice.hpp)
  std::string socket_ifname;      ///< HIERCOLL_SOCKET_IFNAME: "" means the first non-loopback with IPv4
  bool fabric_force_mr = false;   ///< HIERCOLL_FABRIC_FORCE_MR
  bool fabric_cq_wait = true;     ///< HIERCOLL_FABRIC_CQ_WAIT: 0 opens the CQ without a wait object
  uint64_t rxm_buffer_bytes = 0;  ///< FI_OFI_RXM_BUFFER_SIZE, libfabric's own: RxM's eager size (read, never set)
  uint64_t rxm_rx_buffers = 0;    ///< FI_OFI_RXM_MSG_RX_SIZE, libfabric's own: RxM's posted receive buffers (set where unset)
  uint64_t rxd_max_unacked = 0;   ///< FI_OFI_RXD_MAX_UNACKED, libfabric's own: RxD's send window per peer (set where unset)
  uint64_t stripe_min_bytes = 0;  ///< HIERCOLL_STRIPE_MIN_BYTES: the smallest part of a message cut over NICs
  uint64_t flight_entries = 0;    ///< HIERCOLL_FLIGHT_ENTRIES: collectives the flight recorder keeps
  std::string flight_dump;        ///< HIERCOLL_FLIGHT_DUMP: directory for the record on a failure; "": none
  std::string cpu_isa;            ///< HIERCOLL_CPU_ISA: "" means the best the CPU has
  uint64_t stream_bytes = 0;      ///< HIERCOLL_STREAM_BYTES: kernel results this large bypass the caches; 0: never
  bool stream_bytes_set = false;  ///< whether it was set (else the reduce layer derives it from the cache size)
  std::string libfabric;          ///< HIERCOLL_LIBFABRIC: the libfabric.so to load; "": the search (libfabric.hpp)

  /// Every knob from the environment, unset ones at their defaults. A malformed or out-of-range value throws
  /// InvalidUsageError naming the variable.
  static Settings from_env();
  /// Every knob at its default, the environment ignored.
  static Settings defaults();
};

/// What is process-wide (HIERCOLL_DEBUG, HIERCOLL_CPU_ISA, HIERCOLL_STREAM_BYTES, HIERCOLL_LIBFABRIC), read from the
/// environment the first time this is called (the other fields hold their defaults). Throws InvalidUsageError on a
/// malformed value, and again on every call.
const Settings& process_settings();

}  // namespace hiercoll::base
