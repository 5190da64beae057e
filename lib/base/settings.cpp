#include "base/settings.hpp"

#include <cstdlib>
#include <functional>

#include "base/env.hpp"
#include "base/text.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::base {

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> list = {
      {"HIERCOLL_DEBUG", "WARN"},
      {"HIERCOLL_CHECK_COLLECTIVES", "0"},
      {"HIERCOLL_ALGO", ""},
      {"HIERCOLL_NODE_ID", ""},
      {"HIERCOLL_NET_BW_GBPS", "1"},
      {"HIERCOLL_NET_LAT_US", "30"},
      {"HIERCOLL_NET_OVERHEAD_US", "2"},
      {"HIERCOLL_NET_PROBE_BYTES", "8M"},
      {"HIERCOLL_SHM_BW_GBPS", "4"},
      {"HIERCOLL_SHM_LAT_US", "2"},
      {"HIERCOLL_SHM_PIECE_BYTES", ""},
      {"HIERCOLL_NET_STAGING", "0"},
      {"HIERCOLL_CALLER_THREAD", "1"},
      {"HIERCOLL_SPIN_YIELD", "auto"},
      {"HIERCOLL_CMA_BYTES", "0"},
      {"HIERCOLL_CUDA_PIECE_BYTES", "4M"},
      {"HIERCOLL_CHUNK_BYTES", "1M"},
      {"HIERCOLL_PIPELINE_SLOTS", "4"},
      {"HIERCOLL_TIMEOUT_MS", "1800000"},
      {"HIERCOLL_PEER_WATCH", "1"},
      {"HIERCOLL_HEARTBEAT_TIMEOUT_MS", "10000"},
      {"HIERCOLL_FABRIC_PROVIDER", ""},
      {"HIERCOLL_LIBFABRIC", ""},
      {"HIERCOLL_FABRIC_IFACE", ""},
      {"HIERCOLL_SOCKET_IFNAME", ""},
      {"HIERCOLL_FABRIC_FORCE_MR", "0"},
      {"HIERCOLL_FABRIC_CQ_WAIT", "1"},
      {"HIERCOLL_STRIPE_MIN_BYTES", "128K"},
      {"FI_OFI_RXM_BUFFER_SIZE", "16K"},
      {"FI_OFI_RXM_MSG_RX_SIZE", "1024"},
      {"FI_OFI_RXD_MAX_UNACKED", "16"},
      {"HIERCOLL_CPU_ISA", ""},
      {"HIERCOLL_STREAM_BYTES", ""},
      {"HIERCOLL_FLIGHT_ENTRIES", "256"},
      {"HIERCOLL_FLIGHT_DUMP", ""},
  };
  return list;
}

namespace {

// Each knob's text: the environment's when `use_env` and set, else its declared default.
class Reader {
 public:
  explicit Reader(bool use_env) : use_env_(use_env) {}

  std::string text(const char* name) const {
    if (use_env_) {
      if (auto value = env_string(name)) return *value;
    }
    for (const Knob& knob : knobs()) {
      if (std::string(knob.name) == name) return knob.fallback;
    }
    throw InternalError(std::string("setting ") + name + " is not declared in knobs()");
  }
  bool set(const char* name) const { return use_env_ && env_string(name).has_value(); }

  std::string one_of(const char* name, std::initializer_list<const char*> allowed) const {
    std::string value = text(name);
    if (value.empty()) return value;
    std::string list;
    for (const char* a : allowed) {
      if (value == a) return value;
      base::append_listed(list, a);
    }
    throw InvalidUsageError(std::string(name) + "='" + value + "' is not one of: " + list);
  }

  int64_t integer(const char* name, int64_t min) const {
    std::string value = text(name);
    char* end = nullptr;
    long long parsed = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0')
      throw InvalidUsageError(std::string(name) + "='" + value + "' is not an integer");
    if (parsed < min) {
      throw InvalidUsageError(std::string(name) + "=" + value + " is below its minimum " + std::to_string(min));
    }
    return parsed;
  }
  bool flag(const char* name) const { return integer(name, 0) != 0; }

  double positive(const char* name) const {
    std::string value = text(name);
    char* end = nullptr;
    double parsed = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(parsed > 0)) {
      throw InvalidUsageError(std::string(name) + "='" + value + "' is not a positive number");
    }
    return parsed;
  }

  uint64_t bytes(const char* name, uint64_t min) const {
    uint64_t parsed = parse_bytes(text(name), name);
    if (parsed < min) {
      throw InvalidUsageError(std::string(name) + "=" + text(name) + " is below its minimum of " + std::to_string(min) +
                              " bytes");
    }
    return parsed;
  }

 private:
  bool use_env_;
};

// The process-wide knobs.
void read_process(const Reader& r, Settings& s) {
  s.debug = r.one_of("HIERCOLL_DEBUG", {"VERSION", "WARN", "INFO", "DETAIL", "TRACE"});
  s.cpu_isa = r.one_of("HIERCOLL_CPU_ISA", {"scalar", "avx2", "avx512"});
  s.stream_bytes_set = !r.text("HIERCOLL_STREAM_BYTES").empty();
  s.stream_bytes = s.stream_bytes_set ? r.bytes("HIERCOLL_STREAM_BYTES", 0) : 0;
  s.libfabric = r.text("HIERCOLL_LIBFABRIC");
}

Settings read(bool use_env) {
  const Reader r(use_env);
  Settings s;
  read_process(r, s);
  s.check_collectives = r.flag("HIERCOLL_CHECK_COLLECTIVES") || s.debug == "DETAIL";
  s.algo = r.text("HIERCOLL_ALGO");  // the selector's rows say which names it takes (algo::forced_algorithm)
  s.node_id = r.text("HIERCOLL_NODE_ID");
  s.net_bw_gbps = r.positive("HIERCOLL_NET_BW_GBPS");
  s.net_lat_us = r.positive("HIERCOLL_NET_LAT_US");
  s.net_bw_from_env = r.set("HIERCOLL_NET_BW_GBPS");
  s.net_lat_from_env = r.set("HIERCOLL_NET_LAT_US");
  s.net_overhead_us = r.positive("HIERCOLL_NET_OVERHEAD_US");
  s.net_overhead_from_env = r.set("HIERCOLL_NET_OVERHEAD_US");
  s.net_probe_bytes = r.bytes("HIERCOLL_NET_PROBE_BYTES", 0);
  s.shm_bw_gbps = r.positive("HIERCOLL_SHM_BW_GBPS");
  s.shm_lat_us = r.positive("HIERCOLL_SHM_LAT_US");
  s.shm_piece_bytes = r.text("HIERCOLL_SHM_PIECE_BYTES").empty() ? 0 : r.bytes("HIERCOLL_SHM_PIECE_BYTES", 4096);
  s.net_staging = r.flag("HIERCOLL_NET_STAGING");
  s.caller_thread = r.flag("HIERCOLL_CALLER_THREAD");
  s.spin_yield = r.one_of("HIERCOLL_SPIN_YIELD", {"auto", "0", "1"});
  s.cma_bytes = r.bytes("HIERCOLL_CMA_BYTES", 0);
  s.cuda_piece_bytes = r.bytes("HIERCOLL_CUDA_PIECE_BYTES", 4096);
  s.chunk_bytes = r.bytes("HIERCOLL_CHUNK_BYTES", 1);
  s.pipeline_slots = static_cast<int>(r.integer("HIERCOLL_PIPELINE_SLOTS", 1));
  s.chunk_from_env = r.set("HIERCOLL_CHUNK_BYTES");
  s.slots_from_env = r.set("HIERCOLL_PIPELINE_SLOTS");
  s.timeout_ms = r.integer("HIERCOLL_TIMEOUT_MS", 1);
  s.timeout_from_env = r.set("HIERCOLL_TIMEOUT_MS");
  s.peer_watch = r.flag("HIERCOLL_PEER_WATCH");
  s.heartbeat_timeout_ms = r.integer("HIERCOLL_HEARTBEAT_TIMEOUT_MS", 0);
  s.fabric_provider = r.text("HIERCOLL_FABRIC_PROVIDER");
  s.fabric_iface = r.text("HIERCOLL_FABRIC_IFACE");
  s.socket_ifname = r.text("HIERCOLL_SOCKET_IFNAME");
  s.fabric_force_mr = r.flag("HIERCOLL_FABRIC_FORCE_MR");
  s.fabric_cq_wait = r.flag("HIERCOLL_FABRIC_CQ_WAIT");
  s.stripe_min_bytes = r.bytes("HIERCOLL_STRIPE_MIN_BYTES", 1);
  s.rxm_buffer_bytes = r.bytes("FI_OFI_RXM_BUFFER_SIZE", 1);
  s.rxm_rx_buffers = static_cast<uint64_t>(r.integer("FI_OFI_RXM_MSG_RX_SIZE", 1));
  s.rxd_max_unacked = static_cast<uint64_t>(r.integer("FI_OFI_RXD_MAX_UNACKED", 1));
  s.flight_entries = static_cast<uint64_t>(r.integer("HIERCOLL_FLIGHT_ENTRIES", 1));
  s.flight_dump = r.text("HIERCOLL_FLIGHT_DUMP");
  return s;
}

}  // namespace

Settings Settings::from_env() { return read(true); }
Settings Settings::defaults() { return read(false); }

const Settings& process_settings() {
  static const Settings settings = [] {
    Settings s = Settings::defaults();
    read_process(Reader(true), s);  // only these: a malformed communicator knob is the communicator's error
    return s;
  }();
  return settings;
}

}  // namespace hiercoll::base
