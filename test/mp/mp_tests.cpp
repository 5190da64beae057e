// Multi-process tests: real ranks over the libfabric tcp provider on loopback, each checking its results
// against a serial reference (see mp_worker.cpp).
#define CATCH_CONFIG_MAIN
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "fuzz.hpp"
#include "values.hpp"
#include "launcher.hpp"

using hiercoll::test::launch;
using hiercoll::test::LaunchOptions;
using hiercoll::test::LaunchResult;

namespace {

LaunchOptions loopback(std::map<std::string, std::string> extra = {}) {
  LaunchOptions options;
  options.env = {
      {"HIERCOLL_FABRIC_PROVIDER", "tcp"}, {"HIERCOLL_FABRIC_IFACE", "lo"}, {"HIERCOLL_TIMEOUT_MS", "60000"}};
  for (auto& [k, v] : extra) options.env[k] = v;
  options.timeout = std::chrono::seconds(600);
  return options;
}

}  // namespace

TEST_CASE("allreduce equals the serial reference for every type and op", "[mp][allreduce][quick][slow][matrix]") {
  // One rank has no algorithm to force: only "auto" there.
  const auto [ranks, algo] = GENERATE(table<int, std::string>({{1, "auto"},
                                                                {2, "auto"}, {2, "ring"}, {2, "rd"},
                                                                {3, "auto"}, {3, "ring"}, {3, "rd"},
                                                                {4, "auto"}, {4, "ring"}, {4, "rd"},
                                                                {5, "auto"}, {5, "ring"}, {5, "rd"}}));
  auto options = loopback();
  if (algo != "auto") options.env["HIERCOLL_ALGO"] = algo;
  // Small chunks so that even mid-size messages cross many pipeline chunks.
  options.env["HIERCOLL_CHUNK_BYTES"] = "64K";
  INFO("ranks " << ranks << " algo " << algo);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"allreduce"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

struct Shape {
  const char* name;
  std::vector<int> node_of;
};

// `sharded`: the sharded reduction servers in the inter-node phase, or over all ranks where the layout has no node
// structure to use (irregular, one rank per node).
// Every layout with both algorithms; under HIERCOLL_TEST_MATRIX=widths (the sanitizers) every layout once, the
// algorithms alternating, so each layout and each algorithm still runs: what a sanitizer finds is in the threads and
// buffers both share, and the release build runs the whole product.
std::vector<std::pair<Shape, std::string>> layout_matrix() {
  const std::vector<Shape> shapes = {
      {"1x4", {0, 0, 0, 0}},           {"2x2", {0, 0, 1, 1}},       {"3x2", {0, 0, 1, 1, 2, 2}},
      {"2x3", {0, 0, 0, 1, 1, 1}},     {"4x1", {0, 1, 2, 3}},       {"irregular 2+1", {0, 0, 1}},
      {"irregular 1+3+1", {0, 1, 1, 1, 2}}, {"interleaved 2x2", {0, 1, 0, 1}}};
  const std::vector<std::string> algos = {"hier", "sharded"};
  std::vector<std::pair<Shape, std::string>> runs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t a = 0; a < algos.size(); ++a) {
      if (!hiercoll::test::widths_only() || a == (i + 1) % algos.size()) runs.emplace_back(shapes[i], algos[a]);
    }
  }
  return runs;
}

TEST_CASE("hierarchical allreduce equals the serial reference on emulated node layouts", "[mp][hier][slow][matrix]") {
  const auto [shape, algo] = GENERATE(from_range(layout_matrix()));
  auto options =
      loopback({{"HIERCOLL_ALGO", algo}, {"HIERCOLL_SHM_PIECE_BYTES", "64K"}, {"HIERCOLL_CHUNK_BYTES", "16K"}});
  options.node_of = shape.node_of;
  INFO("layout " << shape.name << ", HIERCOLL_ALGO=" << algo);
  auto result = launch(static_cast<int>(shape.node_of.size()), HIERCOLL_MP_WORKER, {"allreduce"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

// The device path's flow on host memory: the inter-node phase works on staging buffers, copied out after the
// intra-node reduce-scatter and back before the allgather (allreduce_hier's `network_staging`).
TEST_CASE("hierarchical allreduce through network staging buffers equals the serial reference",
          "[mp][hier][quick][slow]") {
  auto shape = GENERATE(Shape{"2x2", {0, 0, 1, 1}}, Shape{"3x2", {0, 0, 1, 1, 2, 2}});
  std::string algo = GENERATE(std::string("hier"), std::string("sharded"));
  auto options = loopback({{"HIERCOLL_ALGO", algo},
                           {"HIERCOLL_SHM_PIECE_BYTES", "64K"},
                           {"HIERCOLL_CHUNK_BYTES", "16K"},
                           {"HIERCOLL_NET_STAGING", "1"}});
  options.node_of = shape.node_of;
  INFO("layout " << shape.name << ", HIERCOLL_ALGO=" << algo);
  auto result = launch(static_cast<int>(shape.node_of.size()), HIERCOLL_MP_WORKER, {"allreduce"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("ranks are grouped into nodes by HIERCOLL_NODE_ID", "[mp][hier]") {
  auto options = loopback();
  options.node_of = {1, 0, 1, 0, 1, 0};  // node numbers follow the lowest rank: rank 0's node is node 0
  auto result = launch(6, HIERCOLL_MP_WORKER, {"layout"}, options);
  INFO(result.report());
  REQUIRE(result.all_ok());
  for (int r = 0; r < 6; ++r) {
    std::string want = "LAYOUT rank=" + std::to_string(r) + " node=" + std::to_string(r % 2) +
                       " local_rank=" + std::to_string(r / 2) + " local_size=3 nodes=2";
    CHECK(result.ranks[r].output.find(want) != std::string::npos);
  }
}

// A rank's Communicator::tuning(), as hiercoll_mp_worker prints it (print_tuning).
struct TuningLine {
  double net_us = -1, net_gbps = -1;
  bool probed = false;
  long long chunk = -1, slots = -1;
  double overhead_us = -1, ranks_per_cpu = -1;
  bool yields = false;
  std::string figures;  // the network figures as printed, exactly
};
std::optional<TuningLine> tuning_of(const std::string& output) {
  static const std::regex line(
      R"(TUNING rank=\d+ net_us=(\S+) net_gbps=(\S+) probed=([01]) chunk=(\d+) slots=(\d+) piece=\d+ )"
      R"(overhead_us=(\S+) ranks_per_cpu=(\S+) yield=([01]))");
  std::smatch m;
  if (!std::regex_search(output, m, line)) return std::nullopt;
  return TuningLine{std::stod(m[1]),  std::stod(m[2]), m[3] == "1",     std::stoll(m[4]),
                    std::stoll(m[5]), std::stod(m[6]), std::stod(m[7]), m[8] == "1",
                    m[1].str() + " " + m[2].str() + " " + m[6].str()};
}

namespace {
// The CPUs this test process may run on: those of every rank it launches (they run unpinned on this host).
int allowed_cpus() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  REQUIRE(sched_getaffinity(0, sizeof cpus, &cpus) == 0);
  return CPU_COUNT(&cpus);
}
}  // namespace

// Node flag waits yield the core where the ranks of the machine outnumber its CPUs, whether they are one node's or
// several emulated nodes' (which share the machine's cores as much); HIERCOLL_SPIN_YIELD forces either way.
TEST_CASE("flag waits yield where the machine's ranks outnumber its CPUs, on one node or several", "[mp][hier]") {
  auto shape = GENERATE(Shape{"1x2", {0, 0}}, Shape{"2x1", {0, 1}}, Shape{"2x2", {0, 0, 1, 1}},
                        Shape{"4x1", {0, 1, 2, 3}});
  const std::string forced = GENERATE(std::string(), std::string("0"), std::string("1"));
  auto options = loopback(forced.empty() ? std::map<std::string, std::string>{}
                                         : std::map<std::string, std::string>{{"HIERCOLL_SPIN_YIELD", forced}});
  options.node_of = shape.node_of;
  const int ranks = static_cast<int>(shape.node_of.size());
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"layout"}, options);
  INFO(shape.name << ", HIERCOLL_SPIN_YIELD=" << forced << "\n" << result.report());
  REQUIRE(result.all_ok());
  // Every rank runs unpinned on this host: the machine's ranks against the CPUs they all share.
  const bool crowded = ranks > allowed_cpus();
  const bool want = forced.empty() ? crowded : forced == "1";
  for (int r = 0; r < ranks; ++r) {
    const auto mine = tuning_of(result.ranks[static_cast<size_t>(r)].output);
    REQUIRE(mine);
    CHECK(mine->yields == want);
  }
}

// The start-up link probe measures the fabric between nodes 0 and 1; rank 0 hands its figures to every rank, so every
// rank's cost model chooses alike. (Its figures against a shaped link: test/cluster/link_probe_check.sh.)
TEST_CASE("the link probe's figures reach every rank's cost model", "[mp][hier]") {
  auto shape = GENERATE(Shape{"2x2", {0, 0, 1, 1}}, Shape{"3x1", {0, 1, 2}}, Shape{"irregular 1+2", {0, 1, 1}});
  auto options = loopback({{"HIERCOLL_NET_PROBE_BYTES", "2M"}});
  options.node_of = shape.node_of;
  auto result = launch(static_cast<int>(shape.node_of.size()), HIERCOLL_MP_WORKER, {"choices"}, options);
  INFO(shape.name << "\n" << result.report());
  REQUIRE(result.all_ok());
  const auto first = tuning_of(result.ranks[0].output);
  REQUIRE(first);
  CHECK(first->probed);
  CHECK(first->net_us > 0);
  CHECK(first->net_gbps > 0);
  CHECK_FALSE((first->net_us == 30 && first->net_gbps == 1));  // measured, not the defaults
  CHECK(first->overhead_us > 0);
  // Every rank is on this host with the same CPUs: as many ranks per CPU as there are ranks over those CPUs.
  CHECK(first->ranks_per_cpu == Approx(static_cast<double>(shape.node_of.size()) / allowed_cpus()));
  const std::regex choices("CHOICES[a-z ]+");
  std::smatch first_choices;
  REQUIRE(std::regex_search(result.ranks[0].output, first_choices, choices));
  for (size_t r = 1; r < shape.node_of.size(); ++r) {
    const auto mine = tuning_of(result.ranks[r].output);
    REQUIRE(mine);
    CHECK(mine->figures == first->figures);
    CHECK(mine->ranks_per_cpu == first->ranks_per_cpu);
    std::smatch mine_choices;
    REQUIRE(std::regex_search(result.ranks[r].output, mine_choices, choices));
    CHECK(mine_choices.str() == first_choices.str());
  }
}

TEST_CASE("network figures set in the environment win over the link probe, which one node or a 0-byte probe skips",
          "[mp][hier]") {
  // Every rank's tuning line from 2 ranks saying hello.
  auto tunings_of = [](const LaunchOptions& options) {
    const auto result = launch(2, HIERCOLL_MP_WORKER, {"hello"}, options);
    INFO(result.report());
    REQUIRE(result.all_ok());
    std::vector<TuningLine> tunings;
    for (const auto& rank : result.ranks) {
      const auto tuning = tuning_of(rank.output);
      REQUIRE(tuning);
      tunings.push_back(*tuning);
    }
    return tunings;
  };
  auto options = loopback({{"HIERCOLL_NET_PROBE_BYTES", "1M"}, {"HIERCOLL_NET_BW_GBPS", "7"}});
  options.node_of = {0, 1};
  for (const TuningLine& tuning : tunings_of(options)) {
    CHECK(tuning.probed);  // the latency was left to measure
    CHECK(tuning.net_gbps == 7);
  }

  options.env["HIERCOLL_NET_LAT_US"] = "40";  // the overhead is still left to measure
  for (const TuningLine& tuning : tunings_of(options)) {
    CHECK(tuning.probed);
    CHECK(tuning.net_us == 40);
    CHECK(tuning.net_gbps == 7);
  }

  options.env["HIERCOLL_NET_OVERHEAD_US"] = "3";  // all three set: nothing left to measure
  for (const TuningLine& tuning : tunings_of(options)) {
    CHECK_FALSE(tuning.probed);
    CHECK(tuning.net_us == 40);
    CHECK(tuning.net_gbps == 7);
    CHECK(tuning.overhead_us == 3);
  }

  for (auto [nodes, bytes] : {std::pair<std::vector<int>, std::string>{{0, 0}, "1M"}, {{0, 1}, "0"}}) {
    auto plain = loopback({{"HIERCOLL_NET_PROBE_BYTES", bytes}});
    plain.node_of = nodes;
    for (const TuningLine& tuning : tunings_of(plain)) {
      CHECK_FALSE(tuning.probed);
      CHECK(tuning.net_us == 30);  // the defaults
      CHECK(tuning.net_gbps == 1);
      CHECK(tuning.overhead_us == 2);
    }
  }
}

// RxM sends larger messages by a handshake that, on a pair exchanging both ways, waits behind the other direction's
// data (docs/cluster.md): between nodes the pipelines cut messages to its eager size, keeping the bytes in flight.
TEST_CASE("between nodes over RxM, network messages fit its eager size unless HIERCOLL_CHUNK_BYTES is set",
          "[mp][hier]") {
  struct Case {
    const char* name;
    std::vector<int> node_of;
    std::map<std::string, std::string> env;
    long long chunk, slots;
  };
  const std::vector<Case> cases = {
      {"2 nodes", {0, 0, 1, 1}, {}, 16384, 256},
      {"1 node", {0, 0, 0, 0}, {}, 1048576, 4},
      {"2 nodes, chunk set", {0, 0, 1, 1}, {{"HIERCOLL_CHUNK_BYTES", "64K"}}, 65536, 4},
      {"2 nodes, RxM buffer set", {0, 0, 1, 1}, {{"FI_OFI_RXM_BUFFER_SIZE", "32768"}}, 32768, 128},
  };
  for (const Case& c : cases) {
    auto options = loopback();
    options.node_of = c.node_of;
    for (const auto& [key, value] : c.env) options.env[key] = value;
    auto result = launch(4, HIERCOLL_MP_WORKER, {"layout"}, options);
    INFO(c.name << "\n" << result.report());
    REQUIRE(result.all_ok());
    for (int r = 0; r < 4; ++r) {
      const auto tuning = tuning_of(result.ranks[r].output);
      REQUIRE(tuning);
      CHECK(tuning->chunk == c.chunk);
      CHECK(tuning->slots == c.slots);
    }
  }
}

namespace {
// The hiercoll segments in /dev/shm created by the given launches' ranks (a segment's name carries its creator's
// pid). Only ours: under ctest -j2 another test's live ranks own segments too.
class SegmentWatch {
 public:
  void add(const LaunchResult& result) {
    for (const auto& rank : result.ranks)
      if (rank.pid > 0) pids_.push_back(rank.pid);
  }
  int left() const {
    int count = 0;
    if (DIR* dir = opendir("/dev/shm")) {
      while (dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name.rfind("hiercoll-", 0) != 0) continue;
        const int creator = std::atoi(name.c_str() + 9);
        count += std::find(pids_.begin(), pids_.end(), creator) != pids_.end();
      }
      closedir(dir);
    }
    return count;
  }

 private:
  std::vector<int> pids_;
};
}  // namespace

TEST_CASE("a rank killed mid-allreduce makes the others fail in time and leaves no shared memory",
          "[mp][errors][hier][slow]") {
  std::string algo = GENERATE(std::string("ring"), std::string("hier"), std::string("sharded"));
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "4000"}, {"HIERCOLL_ALGO", algo}, {"HIERCOLL_TEST_DIE_RANK", "1"}});
  options.node_of = {0, 0, 1, 1};
  options.timeout = std::chrono::seconds(60);
  auto start = std::chrono::steady_clock::now();
  auto result = launch(4, HIERCOLL_MP_WORKER, {"die"}, options);
  INFO(algo << "\n" << result.report());
  CHECK_FALSE(result.timed_out);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(result.ranks[1].exit_code == -SIGKILL);
  for (int r : {0, 2, 3}) {
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(result.ranks[r].output.find("EXPECTED ERROR") != std::string::npos);
  }
  SegmentWatch segments;
  segments.add(result);
  CHECK(segments.left() == 0);
}

// Addresses are inserted on first use (mp_worker.cpp's addresses): 8 ranks over tcp, where every address would cost
// an address handle on an EFA NIC.
TEST_CASE("a rank inserts the addresses of the peers it sends to, not every rank's", "[mp][fabric]") {
  auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", "tcp"}, {"HIERCOLL_ALGO", "ring"},
                           {"HIERCOLL_TIMEOUT_MS", "60000"}});
  options.timeout = std::chrono::seconds(120);
  auto result = launch(8, HIERCOLL_MP_WORKER, {"addresses"}, options);
  INFO(result.report());
  CHECK_FALSE(result.timed_out);
  for (int r = 0; r < 8; ++r) {
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(result.ranks[r].output.find("addresses: 0 mismatches") != std::string::npos);
  }
}

// One fabric and one domain per NIC, shared by a process's communicators (mp_worker.cpp's subgroups): 9 communicators
// per rank running allreduces at once, over tcp (its CQ's wait fd slept on outside the domain's lock) and udp (manual
// progress: each endpoint's keeper takes the domain's lock too), between emulated nodes, with FORCE_MR (the domain's
// registrations shared).
TEST_CASE("a process's communicators share one fabric and one domain per NIC", "[mp][fabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "udp");
  auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", provider}, {"HIERCOLL_ALGO", "ring"},
                           {"HIERCOLL_FABRIC_FORCE_MR", "1"}, {"HIERCOLL_TIMEOUT_MS", "60000"}});
  options.node_of = {0, 0, 1, 1};
  options.timeout = std::chrono::seconds(120);
  auto result = launch(4, HIERCOLL_MP_WORKER, {"subgroups"}, options);
  INFO(provider << "\n" << result.report());
  CHECK_FALSE(result.timed_out);
  for (int r = 0; r < 4; ++r) {
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(result.ranks[r].output.find("subgroups: 0 mismatches") != std::string::npos);
  }
}

// Registrations follow their pages (mp_worker.cpp's mr-pages): under HIERCOLL_FABRIC_FORCE_MR, a buffer unmapped and
// mapped again at its address is registered anew, no call leaves its buffer's registration held, and each makes a
// handful, not one per message: through the ring (tcp's 16 KB messages between the emulated nodes, udp's), and through
// the hierarchical allreduce's staged network phase (HIERCOLL_NET_STAGING: the staging buffers pinned once).
TEST_CASE("registrations follow their pages", "[mp][fabric]") {
  const auto [provider, algo, staging] = GENERATE(table<std::string, std::string, std::string>(
      {{"tcp", "ring", "0"}, {"tcp", "hier", "1"}, {"udp", "ring", "0"}}));
  auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", provider}, {"HIERCOLL_ALGO", algo},
                           {"HIERCOLL_NET_STAGING", staging}, {"HIERCOLL_FABRIC_FORCE_MR", "1"},
                           {"HIERCOLL_TIMEOUT_MS", "60000"}});
  options.node_of = {0, 0, 1, 1};
  options.timeout = std::chrono::seconds(120);
  auto result = launch(4, HIERCOLL_MP_WORKER, {"mr-pages"}, options);
  INFO(provider << " " << algo << " staging " << staging << "\n" << result.report());
  CHECK_FALSE(result.timed_out);
  for (int r = 0; r < 4; ++r) {
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(result.ranks[r].output.find("mr-pages: 0 mismatches") != std::string::npos);
  }
}

// A survivor's buffers are its own again the moment the error returns: unmapped and mapped afresh at once, nothing
// writes into them (mp_worker.cpp's die-remap), on a provider with automatic progress (tcp's RxM) and on one with
// manual progress (udp's RxD), through the ring and the hierarchical allreduce.
TEST_CASE("after a peer dies mid-allreduce, nothing touches a survivor's buffers once the error returns",
          "[mp][errors][death]") {
  const auto [provider, algo] = GENERATE(table<std::string, std::string>({{"tcp", "ring"}, {"tcp", "hier"},
                                                                          {"udp", "ring"}}));
  auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", provider}, {"HIERCOLL_ALGO", algo},
                           {"HIERCOLL_TIMEOUT_MS", "20000"}, {"HIERCOLL_TEST_DIE_RANK", "1"}});
  options.node_of = {0, 0, 1, 1};
  options.timeout = std::chrono::seconds(120);
  auto result = launch(4, HIERCOLL_MP_WORKER, {"die-remap"}, options);
  INFO(provider << " " << algo << "\n" << result.report());
  CHECK_FALSE(result.timed_out);
  CHECK(result.ranks[1].exit_code == -SIGKILL);
  for (int r : {0, 2, 3}) {
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(result.ranks[r].output.find("EXPECTED ERROR") != std::string::npos);
    CHECK(result.ranks[r].output.find("REMAP OK") != std::string::npos);
  }
}

// Without the peer watch (which names a dead rank sooner: the [death] case), the timeout still ends the wait.
TEST_CASE("a rank killed in a small one-node allreduce (run on the callers' threads) fails the others at the timeout",
          "[mp][errors][hier][quick]") {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "3000"}, {"HIERCOLL_TEST_DIE_RANK", "2"},
                           {"HIERCOLL_TEST_DIE_COUNT", "2"}, {"HIERCOLL_PEER_WATCH", "0"}});
  options.timeout = std::chrono::seconds(60);
  auto start = std::chrono::steady_clock::now();
  auto result = launch(4, HIERCOLL_MP_WORKER, {"die"}, options);
  INFO(result.report());
  CHECK_FALSE(result.timed_out);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(result.ranks[2].exit_code == -SIGKILL);
  for (int r : {0, 1, 3}) {
    const std::string& out = result.ranks[r].output;
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(out.find("EXPECTED ERROR [timeout]: allreduce(2 x float32) sum [hier] (rank " + std::to_string(r) +
                   ") intra-node exchange: local rank 2 never reached this step") != std::string::npos);
  }
}

TEST_CASE("collectives equal the serial reference whether callers or the progress thread run them",
          "[mp][allreduce]") {
  std::string caller_thread = GENERATE(std::string("1"), std::string("0"));
  // One node (shared memory alone), and two (the caller's thread runs none of them: mixed paths all the same).
  auto shape = GENERATE(Shape{"1x4", {0, 0, 0, 0}}, Shape{"2x2", {0, 0, 1, 1}});
  INFO("HIERCOLL_CALLER_THREAD=" << caller_thread << ", layout " << shape.name);
  auto options = loopback({{"HIERCOLL_CALLER_THREAD", caller_thread}});
  options.node_of = shape.node_of;
  auto result = launch(4, HIERCOLL_MP_WORKER, {"mixed-paths"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("after an operation on the progress thread, small collectives run on their callers' threads again",
          "[mp][allreduce]") {
  auto result = launch(2, HIERCOLL_MP_WORKER, {"turn-returns"}, loopback({{"HIERCOLL_FLIGHT_ENTRIES", "600"}}));
  INFO(result.report());
  REQUIRE(result.all_ok());
  for (const auto& rank : result.ranks) CHECK(rank.output.find("PROGRESS_RUN 0\n") != std::string::npos);
}

TEST_CASE("a rank that stops calling collectives is named by every other rank and by the flight records",
          "[mp][errors][flight]") {
  char dir_template[] = "/tmp/hiercoll-flight-test-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  auto options =
      loopback({{"HIERCOLL_TIMEOUT_MS", "3000"}, {"HIERCOLL_TEST_HANG_RANK", "2"}, {"HIERCOLL_FLIGHT_DUMP", dir}});
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hang"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
  for (int r : {0, 1, 3}) {
    const std::string& out = result.ranks[r].output;
    CHECK(out.find("EXPECTED ERROR [timeout]") != std::string::npos);
    CHECK(out.find("no answer from rank 2 ") != std::string::npos);  // the others are level: not named
    CHECK(out.find("flight record in " + dir) != std::string::npos);
  }
  // The merged records: ranks 0, 1, 3 failed in collective #6 (the init barrier is #0), rank 2 never called it.
  const std::string report_file = dir + "/report.txt";
  const std::string command = "python3 " HIERCOLL_SOURCE_DIR "/tools/flight-report " + dir + " > " + report_file;
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream in(report_file);
  std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(report);
  CHECK(report.find("4 of 4 ranks' records") != std::string::npos);
  CHECK(report.find("not called: rank(s) 2 never called #6 allreduce(") != std::string::npos);
  CHECK(report.find("rank 0: 6 collectives completed, in #6 allreduce(") != std::string::npos);
  CHECK(report.find("rank 2: 6 collectives completed, idle") != std::string::npos);
  CHECK(report.find("(failed)") != std::string::npos);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("on_failure tells every rank once: those that timed out before their error, the idle one of the abort",
          "[mp][errors]") {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "2000"}, {"HIERCOLL_TEST_HANG_RANK", "2"}});
  auto result = launch(4, HIERCOLL_MP_WORKER, {"failure-callback"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
  for (int r : {0, 1, 3}) CHECK(result.ranks[r].output.find("TOLD rank=" + std::to_string(r) + " code=timeout before the error [timeout]") != std::string::npos);
  CHECK(result.ranks[2].output.find("TOLD rank=2 code=remote error") != std::string::npos);
}

// Allgathers and broadcasts of 64 KB and more per rank read the peers' buffers directly (HIERCOLL_CMA_BYTES, off by
// default) where each rank has a core: 1 and 2 ranks here.
TEST_CASE("the other collectives equal the serial reference", "[mp][collectives][quick]") {
  int ranks = GENERATE(1, 2, 3, 4, 5);
  INFO("ranks " << ranks);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"collectives"},
                       loopback({{"HIERCOLL_CHUNK_BYTES", "16K"}, {"HIERCOLL_CMA_BYTES", "64K"}}));
  INFO(result.report());
  CHECK(result.all_ok());
}

// On one node reduce-scatter and allgather go through shared memory in rounds of the piece size: small pieces
// make hundreds of rounds, so the slot rotation and flag generations run many times over. Allgathers and broadcasts
// stage too (HIERCOLL_CMA_BYTES=0, the default), where the test above reads the peers' buffers directly from 64 KB.
TEST_CASE("the other collectives equal the serial reference through shared memory in many rounds",
          "[mp][collectives]") {
  int ranks = GENERATE(3, 4);
  INFO("ranks " << ranks);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"collectives"},
                       loopback({{"HIERCOLL_CHUNK_BYTES", "16K"}, {"HIERCOLL_SHM_PIECE_BYTES", "4K"},
                                 {"HIERCOLL_CMA_BYTES", "0"}}));
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("a peer watch held off the CPU past its heartbeat timeout reports no rank that kept beating",
          "[mp][errors]") {
  auto result = launch(3, HIERCOLL_MP_WORKER, {"stall"}, loopback());
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("with no provider named, the ranks of one host take shm and ranks across nodes a network NIC",
          "[mp][quick]") {
  LaunchOptions options = loopback({{"HIERCOLL_FABRIC_PROVIDER", ""}});  // empty: the default, whatever CI set
  auto one_host = launch(2, HIERCOLL_MP_WORKER, {"nic"}, options);
  INFO(one_host.report());
  REQUIRE(one_host.all_ok());
  for (int r = 0; r < 2; ++r) {
    CHECK_THAT(one_host.ranks[static_cast<size_t>(r)].output, Catch::Contains("rank " + std::to_string(r) + " NIC shm"));
  }
  options.node_of = {0, 1};  // two emulated nodes: shm cannot join them
  auto two_nodes = launch(2, HIERCOLL_MP_WORKER, {"nic"}, options);
  INFO(two_nodes.report());
  REQUIRE(two_nodes.all_ok());
  for (int r = 0; r < 2; ++r) {
    CHECK_THAT(two_nodes.ranks[static_cast<size_t>(r)].output, Catch::Contains("rank " + std::to_string(r) + " NIC lo"));
  }
}

// On one host with no provider named the fabric opens after create (engine: open_deferred), and create's barrier runs
// through the node's memory: every collective, point to point and alltoall included, must still match the serial
// reference on every rank.
TEST_CASE("with no provider named, one host's ranks open the fabric after create and every collective matches",
          "[mp][quick]") {
  auto result = launch(4, HIERCOLL_MP_WORKER, {"scale"}, loopback({{"HIERCOLL_FABRIC_PROVIDER", ""}}));
  INFO(result.report());
  REQUIRE(result.all_ok());
  CHECK_THAT(result.ranks[0].output, Catch::Contains("scale: 4 ranks on 1 nodes, every collective matched"));
}

// Where no libfabric loads (HIERCOLL_LIBFABRIC naming a file that is not there: only that one is tried), one host's
// ranks take hiercoll's own endpoint, unix, and every collective, point to point and alltoall included, matches the
// serial reference on every rank; HIERCOLL_FABRIC_PROVIDER=unix names it with libfabric present.
TEST_CASE("without libfabric, one host's ranks pass messages over Unix sockets and every collective matches",
          "[mp][quick]") {
  const bool named = GENERATE(false, true);
  auto options = named ? loopback({{"HIERCOLL_FABRIC_PROVIDER", "unix"}})
                       : loopback({{"HIERCOLL_FABRIC_PROVIDER", ""}, {"HIERCOLL_LIBFABRIC", "/nonexistent/libfabric.so.1"}});
  INFO((named ? "HIERCOLL_FABRIC_PROVIDER=unix" : "no libfabric"));
  auto nic = launch(3, HIERCOLL_MP_WORKER, {"nic"}, options);
  INFO(nic.report());
  REQUIRE(nic.all_ok());
  for (int r = 0; r < 3; ++r) {
    CHECK_THAT(nic.ranks[static_cast<size_t>(r)].output, Catch::Contains("rank " + std::to_string(r) + " NIC unix"));
  }
  auto result = launch(4, HIERCOLL_MP_WORKER, {"collectives"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

// Across nodes a job needs libfabric: without it every rank fails create at once, instead of waiting for a timeout
// or running its network phase on a path nobody chose. A rank that opens its endpoint names what was searched and
// what to install; one that another's failure reaches first (the node's shared memory gone with its maker) names
// that rank, which gave up.
TEST_CASE("without libfabric, a job across nodes fails create at once, naming what to install", "[mp][errors][quick]") {
  auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", ""}, {"HIERCOLL_LIBFABRIC", "/nonexistent/libfabric.so.1"}});
  options.node_of = {0, 0, 1, 1};
  const auto start = std::chrono::steady_clock::now();
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  int named = 0;
  for (const auto& rank : result.ranks) {
    CHECK(rank.exit_code == 3);
    const bool names_libfabric = rank.output.find("/nonexistent/libfabric.so.1") != std::string::npos &&
                                 rank.output.find("apt-get install libfabric1") != std::string::npos;
    named += names_libfabric;
    if (!names_libfabric) CHECK_THAT(rank.output, Catch::Contains("gave up on the communicator"));
  }
  CHECK(named >= 1);
}

bool names_rank(const std::string& text, int rank);
TEST_CASE("a rank killed before the fabric opened after create is named by every survivor, well before the timeout",
          "[mp][errors]") {
  auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", ""}, {"HIERCOLL_TEST_DIE_RANK", "2"}});
  options.timeout = std::chrono::seconds(90);
  const auto start = std::chrono::steady_clock::now();
  auto result = launch(4, HIERCOLL_MP_WORKER, {"die-after-create"}, options);
  INFO(result.report());
  CHECK_FALSE(result.timed_out);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));  // the ranks' timeout is 60 s
  CHECK(result.ranks[2].exit_code == -SIGKILL);
  for (int r : {0, 1, 3}) {
    const std::string& out = result.ranks[static_cast<size_t>(r)].output;
    CHECK(result.ranks[static_cast<size_t>(r)].exit_code == 0);
    REQUIRE(out.find("EXPECTED ERROR") != std::string::npos);
    CHECK(names_rank(out.substr(out.find("EXPECTED ERROR")), 2));
  }
}

TEST_CASE("the TCP store bootstraps a communicator", "[mp][store][quick]") {
  auto options = loopback();
  options.tcp_store = true;
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("bad input gives clear errors and leaves the communicator usable", "[mp][errors][quick]") {
  auto result = launch(3, HIERCOLL_MP_WORKER, {"errors"}, loopback());
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("ranks that disagree on the count all get an error, none hangs", "[mp][errors][slow]") {
  int ranks = GENERATE(2, 3);
  std::string algo = GENERATE(std::string("ring"), std::string("rd"), std::string("hier"));
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"mismatch"},
                       loopback({{"HIERCOLL_TIMEOUT_MS", "5000"}, {"HIERCOLL_ALGO", algo}}));
  INFO(algo << "\n" << result.report());
  CHECK(result.all_ok());
  for (const auto& rank : result.ranks) CHECK(rank.output.find("EXPECTED ERROR") != std::string::npos);
}

// Four ranks start "hello" with a 3 s timeout; rank 3 is hampered by `options`. Ranks 0-2 must each exit with the
// worker's timeout code and an error that names `cause`.
void expect_timeouts_without_rank_3(LaunchOptions options, const std::string& cause) {
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  for (int r = 0; r < 3; ++r) {
    CHECK(result.ranks[r].exit_code == 3);
    CHECK(result.ranks[r].output.find("[timeout]") != std::string::npos);
    CHECK(result.ranks[r].output.find(cause) != std::string::npos);
  }
}

TEST_CASE("a rank that never arrives is named in a timeout", "[mp][errors][quick]") {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "3000"}});
  options.launch_only = 3;  // rank 3 of 4 never starts
  expect_timeouts_without_rank_3(options, "rank(s) 3 of 4 never arrived");
}

// Start-up under load staggers the ranks' clocks by seconds: the first to time out gives up, and the others hear of
// it through the peer watch before their own timeout. They fail at once with the same cause, a timeout naming the
// missing rank, and say who gave up first. Here rank 2's timeout is short and the others' longer than the launch's.
TEST_CASE("a rank that never arrives is named in a timeout by all, when another rank gave up first", "[mp][errors]") {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "60000"}});
  options.launch_only = 3;
  options.rank_env[2] = {{"HIERCOLL_TIMEOUT_MS", "1500"}};
  options.timeout = std::chrono::seconds(30);
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  CHECK_FALSE(result.timed_out);
  for (int r = 0; r < 3; ++r) {
    CHECK(result.ranks[r].exit_code == 3);
    CHECK(result.ranks[r].output.find("ERROR [timeout]") != std::string::npos);
    CHECK(result.ranks[r].output.find("rank(s) 3 of 4 never arrived") != std::string::npos);
  }
  for (int r = 0; r < 2; ++r) CHECK(result.ranks[r].output.find("rank 2 (pid") != std::string::npos);
}

// A rank that got through the store rendezvous but cannot talk to the others (here: another libfabric provider, whose
// wire protocol the tcp ranks do not speak) fails the init barrier: every rank must raise a TimeoutError from the
// constructor, not die of std::terminate with its progress thread still running.
// Rank 3 fails; the others hear through the peer watch that it gave up and fail naming it.
bool names_rank(const std::string& text, int rank);
TEST_CASE("a rank lost between rendezvous and the init barrier gives every rank an error naming it", "[mp][errors]") {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "3000"}});
  options.rank_env[3] = {{"HIERCOLL_FABRIC_PROVIDER", "sockets"}};
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  CHECK(result.ranks[3].exit_code == 3);
  CHECK(result.ranks[3].output.find("init barrier (rank 3)") != std::string::npos);  // times out, or its sends fail
  for (int r = 0; r < 3; ++r) {
    const std::string& out = result.ranks[r].output;
    CHECK(result.ranks[r].exit_code == 3);
    REQUIRE(out.find("ERROR [") != std::string::npos);
    CHECK(out.find("init barrier") != std::string::npos);
    CHECK(names_rank(out.substr(out.find("ERROR [")), 3));
  }
}

TEST_CASE("with HIERCOLL_DEBUG=DETAIL, ranks calling different collectives all get a clear error", "[mp][errors]") {
  auto result = launch(3, HIERCOLL_MP_WORKER, {"check-mismatch"},
                       loopback({{"HIERCOLL_DEBUG", "DETAIL"}, {"HIERCOLL_TIMEOUT_MS", "10000"}}));
  INFO(result.report());
  CHECK(result.all_ok());
  for (const auto& rank : result.ranks) {
    CHECK(rank.output.find("collective mismatch") != std::string::npos);
    CHECK(rank.output.find("broadcast(100 x float32) root 0") != std::string::npos);
  }
}

TEST_CASE("survivors of a dead rank abort and form a new communicator (elastic restart)", "[mp][errors]") {
  std::string algo = GENERATE(std::string("ring"), std::string("hier"));
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "4000"}, {"HIERCOLL_ALGO", algo}, {"HIERCOLL_TEST_DIE_RANK", "2"}});
  options.node_of = {0, 0, 1, 1};
  options.timeout = std::chrono::seconds(90);
  auto result = launch(4, HIERCOLL_MP_WORKER, {"elastic"}, options);
  INFO(algo << "\n" << result.report());
  CHECK(result.ranks[2].exit_code == -SIGKILL);
  for (int r : {0, 1, 3}) {
    CHECK(result.ranks[r].exit_code == 0);
    CHECK(result.ranks[r].output.find("restarted as rank") != std::string::npos);
  }
}

namespace {
// Rank 1's WAKE_MS lines of mp_worker's `scenario` (run_wake, run_wake_node), by kind, for ranks placed on `node_of`.
std::map<std::string, std::vector<double>> wake_ms(const char* scenario, std::vector<int> node_of) {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "20000"}});
  options.node_of = std::move(node_of);
  auto result = launch(2, HIERCOLL_MP_WORKER, {scenario}, options);
  INFO(result.report());
  REQUIRE(result.all_ok());
  std::map<std::string, std::vector<double>> ms;
  std::istringstream lines(result.ranks[1].output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string head, kind;
    double value = 0;
    if (words >> head >> kind >> value && head == "WAKE_MS") ms[kind].push_back(value);
  }
  return ms;
}

// Medians of 3, for load: each well under what waiting for the end of a sleeper's slice would take.
void check_woken(std::map<std::string, std::vector<double>>& ms, std::initializer_list<const char*> kinds) {
  for (const char* kind : kinds) {
    REQUIRE(ms[kind].size() == 3);
    std::sort(ms[kind].begin(), ms[kind].end());
    INFO(kind << ": " << ms[kind][0] << ", " << ms[kind][1] << ", " << ms[kind][2] << " ms");
    CHECK(ms[kind][1] < 12.0);
  }
}
}  // namespace

TEST_CASE("a wait asleep in the network ends when it must: at abort(), and for new work beside a pending receive",
          "[mp][errors]") {
  // The fabric between them, where a wait sleeps on the provider's wait object. Unwoken, each would take the rest
  // of its 50 ms slice: about 25 ms (run_wake).
  auto ms = wake_ms("wake", {0, 1});
  check_woken(ms, {"collective", "recv", "push"});
}

// A rank waiting in the network for a late peer sleeps, on every TCP provider the loaded libfabric offers (1.17's
// net under RxM kept its completion queue's fd readable with nothing to read, and a waiting rank spun on it until
// fabric waits stopped trusting such a fd: FabricEndpoint::fd_wakes_for_nothing).
TEST_CASE("a rank waiting for a late peer costs little CPU on every TCP provider", "[mp][fabric]") {
  auto listing = launch(1, HIERCOLL_MP_WORKER, {"providers"}, loopback());
  REQUIRE(listing.all_ok());
  const size_t line = listing.ranks[0].output.find("PROVIDERS");
  REQUIRE(line != std::string::npos);
  std::set<std::string> listed;
  {
    std::istringstream words(listing.ranks[0].output.substr(line));
    for (std::string word; words >> word;) listed.insert(word);
  }
  REQUIRE(listed.count("tcp"));  // every libfabric build offers it: the case below never runs empty
  for (const std::string provider : {"tcp", "net"}) {
    if (!listed.count(provider)) continue;  // net: libfabric 1.17 alone (1.18 made it its tcp)
    // Two emulated nodes, so that the allreduce crosses the fabric rather than the node's shared memory.
    auto options = loopback({{"HIERCOLL_FABRIC_PROVIDER", provider}});
    options.node_of = {0, 1};
    auto result = launch(2, HIERCOLL_MP_WORKER, {"late-wait"}, options);
    INFO(provider << "\n" << result.report());
    REQUIRE(result.all_ok());
    const std::string& out = result.ranks[1].output;
    const size_t at = out.find("LATE_WAIT 1 ");
    REQUIRE(at != std::string::npos);
    // Rank 1 waits some 900 ms of the run; a wait that spins costs about one CPU-second per second of it.
    CHECK(std::stod(out.substr(at + 12)) < 0.2);
  }
}

TEST_CASE("a wait asleep on a node's flag ends at abort(), not at the end of its sleep", "[mp][errors]") {
  // The collective's wait sleeps on a shared-memory flag (futex), in slices that have grown to 160 ms by the time
  // another thread aborts (225 ms in): unwoken, it would end about 85 ms after the abort (run_wake_node).
  auto ms = wake_ms("wake-node", {0, 0});
  check_woken(ms, {"collective"});
}

// A quarter of the collectives under the sanitizers (HIERCOLL_TEST_MATRIX=widths), which stretch each one: the soak
// there checks that what thousands of calls hold is handed back, which a thousand show as well.
TEST_CASE("soak: thousands of random checked collectives leak nothing", "[mp][soak]") {
  const char* iterations = hiercoll::test::widths_only() ? "1000" : "4000";
  auto options = loopback({{"HIERCOLL_SOAK_ITERATIONS", iterations}, {"HIERCOLL_CHUNK_BYTES", "32K"}});
  options.node_of = {0, 0, 1, 1};
  auto result = launch(4, HIERCOLL_MP_WORKER, {"soak"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
  for (const auto& rank : result.ranks) CHECK(rank.output.find("SOAK rank") != std::string::npos);
  SegmentWatch segments;
  segments.add(result);
  CHECK(segments.left() == 0);
  std::printf("%s", result.ranks[0].output.c_str());
}

// Whether each of `ranks` ranks of a fuzzed soak wrote its soak-done file into `dir` (mp_worker.cpp's soak).
namespace {
bool all_soaks_done(const char* dir, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    if (access((std::string(dir) + "/soak-done-" + std::to_string(r)).c_str(), F_OK) != 0) return false;
  }
  return true;
}
}  // namespace

// The original fault: 13 bytes to the store killed rank 0 of a running job. Here thousands of random and mutated
// frames, on hundreds of connections (half of them past the job token), reach the TCP store (served by rank 0) while
// 4 ranks run random checked collectives: every element must still match and every rank finish.
TEST_CASE("a TCP store fuzzed during collectives leaves them running and correct", "[mp][errors][store]") {
  auto options = loopback({{"HIERCOLL_SOAK_ITERATIONS", "1500"}});
  options.node_of = {0, 0, 1, 1};
  options.tcp_store = true;
  options.store_port = hiercoll::test::free_port();
  options.env["HIERCOLL_JOB_TOKEN"] = "fuzz-job";  // known here: half the connections get past it, into the parser
  // The fuzzer stops once every rank's soak is over; the ranks then count their descriptors (mp_worker.cpp's soak).
  char dir[] = "/tmp/hiercoll-store-fuzz-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  options.env["HIERCOLL_TEST_FUZZ_DIR"] = dir;
  auto soaks_done = [&] { return all_soaks_done(dir, 4); };
  std::atomic<bool> stop{false};
  std::atomic<int> frames{0}, connections{0};
  std::thread fuzzer([&] {
    std::mt19937 rng(99);
    // A SET of key "k" (command 1, key length, key, value length, value), then mutated or replaced by noise.
    const std::vector<uint8_t> set = {1, 1, 0, 0, 0, 'k', 4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    const std::vector<uint8_t> hello = {5, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 'f', 'u', 'z', 'z', '-', 'j', 'o', 'b'};
    for (bool admitted = false; !stop && !soaks_done(); admitted = !admitted) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(options.store_port);
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        std::vector<uint8_t> bytes = admitted ? hello : std::vector<uint8_t>();
        const std::vector<uint8_t> noise = hiercoll::test::fuzzed_frames(set, 20, rng, 40);
        bytes.insert(bytes.end(), noise.begin(), noise.end());
        if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0) {
          frames += 20;
          ++connections;
        }
      }
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::fclose(std::fopen((std::string(dir) + "/fuzz-done").c_str(), "w"));
  });
  auto result = launch(4, HIERCOLL_MP_WORKER, {"soak"}, options);
  stop = true;
  fuzzer.join();
  std::system(("rm -rf " + std::string(dir)).c_str());
  INFO(result.report());
  INFO(frames << " frames on " << connections << " connections");
  CHECK(result.all_ok());
  for (const auto& rank : result.ranks) CHECK(rank.output.find("SOAK rank") != std::string::npos);
  CHECK(frames > 1000);
  std::printf("store fuzz: %d frames on %d connections during the soak\n", frames.load(), connections.load());
}

namespace {
// The TCP ports our child processes (the job's ranks) listen on, found as a stranger on the host would: listening
// sockets in /proc/net/tcp, kept where the socket's inode is among a child's descriptors.
std::set<uint16_t> children_listening_ports() {
  std::set<std::string> inodes;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      const int pid = std::atoi(entry->d_name);
      if (pid <= 0) continue;
      std::ifstream status("/proc/" + std::to_string(pid) + "/status");
      std::string line;
      bool child = false;
      while (std::getline(status, line)) {
        if (line.rfind("PPid:", 0) == 0) child = std::atoi(line.c_str() + 5) == getpid();
      }
      if (!child) continue;
      const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
      if (DIR* fds = opendir(fd_dir.c_str())) {
        while (dirent* fd = readdir(fds)) {
          char target[128] = {0};
          if (readlink((fd_dir + "/" + fd->d_name).c_str(), target, sizeof(target) - 1) > 0 &&
              std::strncmp(target, "socket:[", 8) == 0) {
            inodes.insert(std::string(target + 8, std::strlen(target) - 9));
          }
        }
        closedir(fds);
      }
    }
    closedir(proc);
  }
  std::set<uint16_t> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state == "0A" && inodes.count(inode)) {  // 0A: LISTEN
      ports.insert(static_cast<uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}
}  // namespace

// "No listening socket can be crashed by what arrives on it": while 4 ranks (2 emulated nodes) run checked
// collectives, every TCP port the ranks listen on (the TCP store, the peer watch's hub, libfabric's tcp provider's
// listeners) gets connections carrying random bytes, mutated bytes, nothing at all, or a slow trickle. The job must
// finish with every result right.
TEST_CASE("every listening socket of a running job takes hostile bytes and the job finishes correct",
          "[mp][errors][fuzz]") {
  auto options = loopback({{"HIERCOLL_SOAK_ITERATIONS", "1500"}});
  options.node_of = {0, 0, 1, 1};
  options.tcp_store = true;
  options.store_port = hiercoll::test::free_port();
  // The fuzzer stops once every rank's soak is over; the ranks then count the hung-up connections each listener
  // still holds, and the store must hold none (mp_worker.cpp's soak).
  char dir[] = "/tmp/hiercoll-listener-fuzz-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  options.env["HIERCOLL_TEST_FUZZ_DIR"] = dir;
  options.env["HIERCOLL_TEST_FUZZ_LISTENERS"] = "1";
  auto soaks_done = [&] { return all_soaks_done(dir, 4); };
  std::atomic<bool> stop{false};
  std::atomic<int> frames{0}, connections{0};
  std::set<uint16_t> fuzzed;
  std::mutex fuzzed_mutex;
  std::thread fuzzer([&] {
    std::mt19937 rng(7);
    const std::vector<uint8_t> some(64, 0x5a);  // mutated below, one byte at a time, or replaced by noise
    std::vector<int> trickles;                   // connections that send a byte now and then, and stay open
    for (int round = 0; !stop && !soaks_done(); ++round) {
      std::set<uint16_t> ports = children_listening_ports();
      for (uint16_t port : ports) {
        {
          std::lock_guard<std::mutex> lock(fuzzed_mutex);
          fuzzed.insert(port);
        }
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
          ::close(fd);
          continue;
        }
        ++connections;
        if (round % 7 == 3 && trickles.size() < 16) {
          trickles.push_back(fd);
          continue;
        }
        if (round % 5 != 0) {  // every fifth connection closes without a byte
          const std::vector<uint8_t> bytes = hiercoll::test::fuzzed_frames(some, 8, rng, 200);
          if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0) frames += 8;
        }
        ::close(fd);
      }
      for (int fd : trickles) {
        const uint8_t byte = static_cast<uint8_t>(rng());
        ::send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int fd : trickles) ::close(fd);
    std::fclose(std::fopen((std::string(dir) + "/fuzz-done").c_str(), "w"));
  });
  auto result = launch(4, HIERCOLL_MP_WORKER, {"soak"}, options);
  stop = true;
  fuzzer.join();
  std::system(("rm -rf " + std::string(dir)).c_str());
  INFO(result.report());
  INFO(frames << " frames on " << connections << " connections to " << fuzzed.size() << " ports");
  CHECK(result.all_ok());
  for (const auto& rank : result.ranks) CHECK(rank.output.find("SOAK rank") != std::string::npos);
  // The store, the watch's hub, and a fabric listener per rank at least.
  CHECK(fuzzed.size() >= 6);
  CHECK(frames > 1000);
  std::printf("listener fuzz: %d frames on %d connections to %zu ports during the soak\n", frames.load(),
              connections.load(), fuzzed.size());
}

TEST_CASE("gradient bucketing equals unbucketed allreduce, overlaps, and rebuilds by ready order",
          "[mp][bucketer][quick]") {
  int ranks = GENERATE(1, 2, 3);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"bucketer"}, loopback());
  INFO(result.report());
  CHECK(result.all_ok());
}

namespace {
// The number after `label` in `text` ("DIED_AT 123"), or -1.
long long number_after(const std::string& text, const std::string& label) {
  auto at = text.find(label);
  return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + label.size());
}

// "STARTUP OK calls=N" of every rank, or -1 where missing.
int startup_calls(const std::string& output) {
  auto at = output.find("STARTUP OK calls=");
  return at == std::string::npos ? -1 : std::atoi(output.c_str() + at + 17);
}
}  // namespace

// True if `text` names `rank` in one of hiercoll's forms: "rank 3", "rank(s) 3", "ranks 1, 3", "ranks 2-3".
bool names_rank(const std::string& text, int rank) {
  static const std::regex list(R"(rank(?:s|\(s\))? ([0-9]+(?:(?:, |-)[0-9]+)*))");
  static const std::regex item(R"(([0-9]+)(?:-([0-9]+))?)");
  for (std::sregex_iterator it(text.begin(), text.end(), list), end; it != end; ++it) {
    const std::string ranks = (*it)[1];
    for (std::sregex_iterator jt(ranks.begin(), ranks.end(), item); jt != end; ++jt) {
      const int first = std::stoi((*jt)[1]);
      const int last = (*jt)[2].matched ? std::stoi((*jt)[2]) : first;
      if (first <= rank && rank <= last) return true;
    }
  }
  return false;
}

// Start-up's exchange through the store costs its server (one thread of one process) O(N) requests: rank 0 gathers
// the records and every other rank reads them once. Reading every rank's key on every rank cost 2N^2 and more.
// Label `counts`: a wait read in slices adds a request per slice, so a start-up slowed several times over (the
// sanitizers) adds requests by the second; scripts/dev/sanitize leaves it out.
TEST_CASE("start-up costs the store's server a number of requests linear in the ranks",
          "[mp][startup][quick][counts]") {
  std::map<int, long long> served;
  for (int ranks : {4, 16}) {
    auto options = loopback();
    options.tcp_store = true;
    auto result = launch(ranks, HIERCOLL_MP_WORKER, {"store-requests"}, options);
    INFO(ranks << " ranks\n" << result.report());
    REQUIRE(result.all_ok());
    served[ranks] = number_after(result.ranks[0].output, "STORE_REQUESTS ");
    REQUIRE(served[ranks] > 0);
  }
  INFO("4 ranks: " << served[4] << " requests; 16 ranks: " << served[16]);
  CHECK(served[16] <= 24 * 16);  // a quadratic exchange makes 2 x 16^2 = 512 reads alone
  CHECK(static_cast<double>(served[16]) / static_cast<double>(served[4]) <= 6.0);  // linear: 4, quadratic: 16
}

// Start-up's steps are store calls (join the peer watch, publish node and address, wait for everyone's, read them,
// the node's shared-memory name), then the init barrier. A rank killed before each of its calls, and inside the
// barrier, must make every survivor raise TimeoutError or RemoteError naming it, within the timeout, with no thread,
// descriptor or shared-memory segment left behind (test/mp/startup_worker.cpp). Once it has joined the peer watch,
// its death is a RemoteError (the watch's report), not a timeout.
TEST_CASE("a rank killed at each start-up step is named by every survivor, which leaks nothing",
          "[mp][errors][startup][slow]") {
  auto options = loopback();       // the clean run: a generous timeout, sanitizers slow start-up
  options.node_of = {0, 0, 1, 1};  // node 1's shared memory is made by rank 2 and attached by rank 3
  options.timeout = std::chrono::seconds(120);
  auto clean = launch(4, HIERCOLL_STARTUP_WORKER, {}, options);
  INFO(clean.report());
  REQUIRE(clean.all_ok());
  options.env["HIERCOLL_TIMEOUT_MS"] = "2000";
  // Rank 2 at every step; rank 3 at the steps it alone has: waiting for and reading its node's segment name.
  const int victim = GENERATE(2, 3);
  const int calls = startup_calls(clean.ranks[victim].output);
  REQUIRE(calls > 3);
  const long long joined = number_after(clean.ranks[victim].output, "watch_read_at=");
  REQUIRE(joined > 0);
  SegmentWatch segments;
  for (int step = victim == 2 ? 1 : calls - 1; step <= calls + 1; ++step) {
    // Steps 1..calls: dies before that store call; then just after its last (in the init barrier or the first
    // collectives after it).
    auto run = options;
    run.rank_env[victim] = {{"HIERCOLL_TEST_VICTIM", std::to_string(victim)},
                            {"HIERCOLL_TEST_DIE_AT_CALL", std::to_string(std::min(step, calls))}};
    if (step > calls) run.rank_env[victim]["HIERCOLL_TEST_DIE_AFTER_MS"] = "0";
    for (int r = 0; r < 4; ++r) run.rank_env[r]["HIERCOLL_TEST_VICTIM"] = std::to_string(victim);
    const auto start = std::chrono::steady_clock::now();
    auto result = launch(4, HIERCOLL_STARTUP_WORKER, {}, run);
    const auto took = std::chrono::steady_clock::now() - start;
    segments.add(result);
    INFO("victim rank " << victim << ", step " << step << " of " << calls + 1 << "\n" << result.report());
    CHECK_FALSE(result.timed_out);
    CHECK(took < std::chrono::seconds(30));
    CHECK(result.ranks[victim].exit_code == 9);
    for (int r = 0; r < 4; ++r) {
      if (r == victim) continue;
      const std::string& out = result.ranks[r].output;
      CHECK(result.ranks[r].exit_code == 3);
      if (step > joined) {
        CHECK(out.find("STARTUP ERROR [remote error]") != std::string::npos);
      } else {
        CHECK((out.find("STARTUP ERROR [timeout]") != std::string::npos ||
               out.find("STARTUP ERROR [remote error]") != std::string::npos));
      }
      CHECK(names_rank(out, victim));
      CHECK(out.find("LEAKS threads=0 fds=0") != std::string::npos);
    }
  }
  // A dead creator's segment is left (kill -9 gives it no chance) until the next start-up sweeps it.
  options.env["HIERCOLL_TIMEOUT_MS"] = "60000";
  auto sweep = launch(4, HIERCOLL_STARTUP_WORKER, {}, options);
  INFO(sweep.report());
  CHECK(sweep.all_ok());
  segments.add(sweep);
  CHECK(segments.left() == 0);
}

// A rank that dies (SIGKILL, SIGSEGV, or exit without destroying its communicator), in each algorithm, before,
// at and into an operation, is named by every other rank within 2 s, and their next operation fails at once, with
// the default timeout of 30 minutes (watch/peer_watch.hpp). On emulated nodes of one host, or, with
// HIERCOLL_TEST_NETNS set (test/cluster/with_cluster.sh, CTest's peer_death_cluster), across network namespaces.
TEST_CASE("a rank that dies in any phase of any algorithm is named by every survivor within 2 s, whatever the timeout",
          "[mp][errors][death][quick]") {
  struct Case {
    const char* algo;
    int victim;
    const char* how;
    long after_us;  // into the operation; -1: just before issuing it
    size_t count;
  };
  // Victims 0 (the peer watch's hub), 1 (rank 0's node), 2 and 3 (the other node); each algorithm meets every way of
  // dying and each moment once or more. 4 MB takes tens of milliseconds here: 2 ms and 10 ms land inside it.
  const Case cases[] = {
      {"ring", 1, "kill", 2000, 1 << 20},  {"ring", 0, "segv", -1, 1 << 20},  {"ring", 3, "exit", 0, 1 << 20},
      {"ring", 2, "kill", 10000, 1 << 20}, {"rd", 0, "kill", 0, 1 << 20},     {"rd", 3, "segv", 2000, 1 << 20},
      {"rd", 1, "exit", 10000, 1 << 20},   {"rd", 2, "kill", -1, 1 << 20},    {"hier", 3, "kill", 2000, 1 << 20},
      {"hier", 1, "segv", 0, 1 << 20},     {"hier", 0, "exit", -1, 1 << 20},  {"hier", 2, "segv", 10000, 1 << 20},
      {"hier", 1, "kill", -1, 1000},  // the one-shot small allreduce, on the caller's thread
      {"sharded", 2, "kill", 0, 1 << 20},  {"sharded", 0, "kill", 10000, 1 << 20}, {"sharded", 1, "segv", 2000, 1 << 20},
      {"sharded", 3, "exit", -1, 1 << 20},
      // Alive and silent (a host gone, a cable cut): noticed by heartbeats, HIERCOLL_HEARTBEAT_TIMEOUT_MS=1000 here.
      {"ring", 2, "stop", 2000, 1 << 20},  {"hier", 0, "stop", -1, 1 << 20},
  };
  const char* netns = std::getenv("HIERCOLL_TEST_NETNS");
  double worst_ms = 0;
  for (const Case& c : cases) {
    LaunchOptions options;
    options.env = {{"HIERCOLL_FABRIC_PROVIDER", "tcp"},  {"HIERCOLL_FABRIC_IFACE", "lo"},
                   {"HIERCOLL_ALGO", c.algo},            {"HIERCOLL_TEST_VICTIM", std::to_string(c.victim)},
                   {"HIERCOLL_TEST_DIE_ITER", "2"},      {"HIERCOLL_TEST_DIE_AFTER_US", std::to_string(c.after_us)},
                   {"HIERCOLL_TEST_HOW", c.how},         {"HIERCOLL_TEST_COUNT", std::to_string(c.count)},
                   {"HIERCOLL_NET_PROBE_BYTES", "0"}};  // HIERCOLL_TIMEOUT_MS unset: 30 minutes
    const bool silent = std::string(c.how) == "stop";
    if (silent) options.env["HIERCOLL_HEARTBEAT_TIMEOUT_MS"] = "1000";
    options.node_of = {0, 0, 1, 1};
    options.timeout = std::chrono::seconds(90);  // far beyond 2 s, far below the default timeout
    if (netns != nullptr) {
      options.netns_prefix = netns;
      options.tcp_store = true;
      options.store_host = "10.77.0.1";  // scripts/emulation/cluster's first node
      options.env.erase("HIERCOLL_FABRIC_IFACE");  // each rank picks its node's NIC; loopback reaches no other node
    }
    auto result = launch(4, HIERCOLL_MP_WORKER, {"die-timed"}, options);
    const std::string label = std::string(c.algo) + ", rank " + std::to_string(c.victim) + " " + c.how + " " +
                              (c.after_us < 0 ? "before the operation" : std::to_string(c.after_us) + " us into it");
    INFO(label << "\n" << result.report());
    REQUIRE_FALSE(result.timed_out);
    CHECK(result.ranks[c.victim].exit_code != 0);
    const long long died = number_after(result.ranks[c.victim].output, "DIED_AT ");
    REQUIRE(died > 0);
    double case_worst = 0;
    for (int r = 0; r < 4; ++r) {
      if (r == c.victim) continue;
      const std::string& out = result.ranks[r].output;
      CHECK(result.ranks[r].exit_code == 0);
      const long long noticed = number_after(out, "NOTICED_AT ");
      REQUIRE(noticed > 0);
      const double ms = static_cast<double>(noticed - died) / 1e6;
      case_worst = std::max(case_worst, ms);
      CHECK(ms <= (silent ? 1000 + 2000 : 2000));  // silence: the heartbeat timeout, then as fast as a death
      CHECK(names_rank(out.substr(out.find("NOTICED_AT ")), c.victim));
      // The error is a PeerLostError naming the rank, as structured data: its connection closed (a death), or
      // its heartbeats stopped (silence); the next operation's error names it the same way.
      const std::string victim_text = "rank=" + std::to_string(c.victim);
      CHECK_THAT(out, Catch::Contains("PEER_LOST " + victim_text + " closed=" + (silent ? "0" : "1")));
      CHECK_THAT(out, Catch::Contains("NEXT PEER_LOST " + victim_text));
      const long long next_ms = number_after(out, "NEXT FAILED in ");
      CHECK((next_ms >= 0 && next_ms < 500));
    }
    worst_ms = std::max(worst_ms, case_worst);
    std::printf("death noticed: %-40s %7.1f ms (slowest survivor)\n", label.c_str(), case_worst);
  }
  std::printf("death noticed: slowest of all %.1f ms%s\n", worst_ms, netns ? " (network namespaces)" : "");
}

// A send to a dead peer may still be the provider's when the communicator goes: EFA cancels only posted receives and
// completes a send (in error) after its retries, and udp's ofi_rxd keeps retransmitting. The survivor's sends of a
// 256 MB ring allreduce are in flight when its peer is killed 20 ms in; it must notice, fail its next operation, and
// destroy its communicator without touching memory it freed (run under AddressSanitizer by scripts/dev/sanitize: a
// request freed while the provider still held it is a use-after-free there, and a crash here).
TEST_CASE("a peer killed in the middle of 256 MB sends: the survivor notices and closes cleanly",
          "[mp][errors][death]") {
  const std::string provider = GENERATE(std::string("udp"), std::string("tcp"));
  LaunchOptions options;
  options.env = {{"HIERCOLL_FABRIC_PROVIDER", provider}, {"HIERCOLL_FABRIC_IFACE", "lo"},
                 {"HIERCOLL_ALGO", "ring"},              {"HIERCOLL_TEST_VICTIM", "1"},
                 {"HIERCOLL_TEST_DIE_ITER", "0"},        {"HIERCOLL_TEST_DIE_AFTER_US", "20000"},
                 {"HIERCOLL_TEST_HOW", "kill"},          {"HIERCOLL_TEST_COUNT", std::to_string(64u << 20)},
                 {"HIERCOLL_NET_PROBE_BYTES", "0"}};
  options.node_of = {0, 1};  // two nodes: every byte goes through the provider
  options.timeout = std::chrono::seconds(120);
  auto result = launch(2, HIERCOLL_MP_WORKER, {"die-timed"}, options);
  INFO(provider << "\n" << result.report());
  REQUIRE_FALSE(result.timed_out);
  CHECK(result.ranks[1].exit_code == -SIGKILL);
  const std::string& out = result.ranks[0].output;
  CHECK(result.ranks[0].exit_code == 0);  // destroyed its communicator and returned from main
  CHECK_THAT(out, Catch::Contains("PEER_LOST rank=1"));
  CHECK_THAT(out, Catch::Contains("NEXT PEER_LOST rank=1"));
  CHECK_THAT(out, Catch::Contains("die-timed: 0 mismatches"));
  // Going is bounded, not a wait on the dead peer: udp's quiesce gives up on its unacknowledged sends after 1 s
  // (kQuiesceLimit), and closing an endpoint with sends still in flight returns at once on both providers.
  const auto at = out.find("DESTROYED in ");
  REQUIRE(at != std::string::npos);
  const double destroy_ms = std::stod(out.substr(at + std::strlen("DESTROYED in ")));
  INFO("the survivor's communicator went in " << destroy_ms << " ms");
  CHECK(destroy_ms < 3000);
}
