#include "hiercoll/topology.hpp"

#include <sched.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "algo/hierarchy.hpp"
#include "algo/select.hpp"
#include "engine/schedules.hpp"
#include "fds.hpp"
#include "topo/cpus.hpp"

using namespace hiercoll;

namespace {
std::vector<std::string> nodes_of(int count, int per_node) {
  std::vector<std::string> ids;
  for (int n = 0; n < count; ++n) ids.insert(ids.end(), static_cast<size_t>(per_node), "host" + std::to_string(n));
  return ids;
}
}  // namespace

TEST_CASE("a 4-node x 8-GPU layout is built from host identities", "[topo]") {
  auto ids = nodes_of(4, 8);
  for (int r : {0, 7, 8, 31}) {
    Layout layout = Layout::from_node_ids(ids, r);
    CHECK(layout.node_count == 4);
    CHECK(layout.node == r / 8);
    CHECK(layout.local_rank == r % 8);
    CHECK(layout.local_size == 8);
    CHECK(layout.regular());
    CHECK(layout.rank_at(3, 5) == 29);
  }
  CHECK(Layout::from_node_ids(ids, 0).describe().rfind("4 nodes x 8 ranks: node0=[0,1,2,3,4,5,6,7]", 0) == 0);
}

TEST_CASE("interleaved and irregular layouts are grouped by first appearance", "[topo]") {
  Layout layout = Layout::from_node_ids({"b", "a", "b", "c", "a"}, 4);
  CHECK(layout.node_count == 3);
  CHECK(layout.node_ranks[0] == std::vector<int>{0, 2});  // "b" holds rank 0, so it is node 0
  CHECK(layout.node_ranks[1] == std::vector<int>{1, 4});
  CHECK(layout.node_ranks[2] == std::vector<int>{3});
  CHECK(layout.node == 1);
  CHECK(layout.local_rank == 1);
  CHECK_FALSE(layout.regular());
}

TEST_CASE("the cost model picks recursive doubling small, hierarchical large on several nodes", "[select]") {
  algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  model.net = {30, 1.0};
  model.shm = {2, 20.0};  // shared memory much faster than the network, as on a real node
  Layout two_by_two = Layout::from_node_ids(nodes_of(2, 2), 0);
  algo::Selector selector(model, two_by_two, true);
  // Small: one network round (the rails' recursive doubling between 2 nodes) after a shared-memory reduction,
  // against flat recursive doubling's two rounds among 4 ranks.
  CHECK(model.hierarchical(1024, two_by_two) < model.recursive_doubling(1024, two_by_two));
  CHECK(selector.choose(1024) == algo::Algorithm::kHierarchical);
  CHECK(selector.choose(64 << 20) == algo::Algorithm::kHierarchical);
  // Without nodes to use, small messages take recursive doubling.
  algo::Selector four_nodes(model, Layout::from_node_ids(nodes_of(4, 1), 0), false);
  CHECK(four_nodes.choose(1024) == algo::Algorithm::kRecursiveDoubling);
  // Without a usable hierarchy (irregular layout), large messages take the ring: on 4 ranks the sharded servers'
  // two steps save 4 latencies of 30 µs, far less than the 10% they must win by (select.cpp).
  algo::Selector flat(model, two_by_two, false);
  CHECK(flat.choose(64 << 20) == algo::Algorithm::kRing);
  // Hierarchical moves 2(N-1)/N S through the node link, the ring 2(n-1)/n S: 1.0 vs 1.5 at 2x2.
  double ratio = model.ring(64e6, two_by_two) / model.hierarchical(64e6, two_by_two);
  CHECK(ratio > 1.2);
  CHECK(algo::crossover_bytes(model, 2) >= 1024);
}

TEST_CASE("the sharded servers' cost: two latency steps, the ring's bytes, chosen where they save much latency",
          "[select]") {
  algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  model.net = {100, 0.1};
  model.shm = {2, 20.0};
  const double bytes = 16e6;
  for (int nodes : {2, 3, 4, 8}) {
    INFO(nodes << " nodes");
    const Layout flat = Layout::from_node_ids(nodes_of(nodes, 1), 0),
                 hier = Layout::from_node_ids(nodes_of(nodes, 2), 0);
    // Over all ranks: 2 latencies and 2(n-1)/n of the bytes per rank, against the ring's 2(n-1) latencies.
    const double link = 2.0 * (nodes - 1) / nodes * bytes / 0.1e9;
    CHECK(model.sharded(bytes, flat, false) == Approx(2 * 100e-6 + link));
    CHECK(model.ring(bytes, flat) - model.sharded(bytes, flat, false) == Approx(2 * (nodes - 2) * 100e-6));
    // In the hierarchical schedule it replaces the rail rings: the same saving (over all but one of the 8 pieces,
    // the pipeline's fill, which the inter-node phase dominates), the intra-node phases alike. On two nodes the
    // rails' recursive doubling, one exchange of the whole shard, is one latency cheaper still.
    const double saving = model.hierarchical(bytes, hier) - model.sharded(bytes, hier, true);
    if (nodes == 2) CHECK(saving == Approx(-100e-6));
    if (nodes > 2) CHECK(saving == Approx(2 * (nodes - 2) * 100e-6));
    algo::Selector selector(model, hier, true);
    // Chosen where the model gives them 10% or more (select.cpp: what the model does not price): at 64 KB, which
    // the latency dominates, from three nodes on; never at 64 MB, where the saved latencies are a fraction of a
    // per cent; on two nodes the rails' recursive doubling is as quick.
    CHECK(selector.choose(64 << 10) ==
          (nodes == 2 ? algo::Algorithm::kHierarchical : algo::Algorithm::kSharded));
    CHECK(selector.choose(64 << 20) == algo::Algorithm::kHierarchical);
    for (size_t size : {size_t{64} << 10, size_t{64} << 20}) {
      CHECK(selector.choose(size) == selector.choose(algo::Kind::kAllreduce, size, true));
    }
  }
  // HIERCOLL_ALGO forces it; it is not a flat algorithm (single-node reduce-scatter keeps to shared memory).
  const Layout one_node = Layout::from_node_ids(nodes_of(1, 4), 0);
  algo::Selector forced(model, one_node, true, "sharded");
  CHECK(forced.choose(8) == algo::Algorithm::kSharded);
  CHECK(forced.choose(algo::Kind::kReduceScatter, 1 << 20, false) == algo::Algorithm::kNode);
  CHECK_THROWS_WITH(algo::Selector(model, one_node, true, "servers"), Catch::Contains("sharded"));
}

TEST_CASE("messages cost their CPU overhead, times the ranks sharing each core, where that exceeds the latencies",
          "[select]") {
  algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  model.net = {30, 0.5, 7};
  model.shm = {20, 4.0};
  const Layout flat = Layout::from_node_ids(nodes_of(8, 1), 0);
  // 8 B on a ring of 8: 14 steps of a send and a receive. With a core each, its 14 latencies (420 us) exceed the 28
  // messages' overhead (196 us); with 4 ranks on each core, the overhead four times over is the time.
  const double ring_latencies = 14 * (30e-6 + 1.0 / 0.5e9);
  CHECK(model.ring(8, flat) == Approx(ring_latencies));
  model.ranks_per_cpu = 4;
  CHECK(model.ring(8, flat) == Approx(4 * 28 * 7e-6));
  // The sharded servers send as many messages as the ring in 2 steps (512 B: every server has a 64-byte part): the
  // CPU is their limit much sooner.
  CHECK(model.sharded(512, flat, false) == Approx(4 * 28 * 7e-6));
  // 8 B: one server has it all and handles 14 messages, the others 2 each: the server's 14 are the time, however
  // the cores are shared, since the others' work leaves the shared cores time for them.
  CHECK(model.sharded(8, flat, false) == Approx(14 * 7e-6));
  model.ranks_per_cpu = 0.25;  // fewer ranks than cores: each still pays its own messages once
  CHECK(model.ring(8, flat) == Approx(ring_latencies));
  CHECK(model.sharded(512, flat, false) == Approx(28 * 7e-6));
  CHECK(model.sharded(8, flat, false) == Approx(14 * 7e-6));

  // 16 nodes x 4 ranks. Up to kLeaderBytes local rank 0 alone crosses the network (a quarter of the node's ranks
  // send); above it every rail does. 8 B: one piece, two node barriers, recursive doubling over 16 leaders, 4 rounds.
  const Layout cluster = Layout::from_node_ids(nodes_of(16, 4), 0);
  model.ranks_per_cpu = 32;  // 64 ranks on one 2-CPU host, as scripts/emulation/cluster runs them
  const double barriers = 2 * 20e-6;
  CHECK(model.hierarchical(8, cluster) == Approx(barriers + 3 * 8 / 4e9 + 8 * 7e-6 * 32 / 4));
  const double above = static_cast<double>(algo::kLeaderBytes) * 2;
  CHECK(model.hierarchical(above, cluster) == Approx(barriers + 3 * above / 4e9 + 8 * 7e-6 * 32));
  // The choices it changes: with a core per rank the sharded servers' 2 steps win at 64 KB over the rails' 4 rounds;
  // with 32 ranks on each core their 60 messages a rank lose to those rounds' 8, from 8 KB up. At 8 B one leader
  // serves it all: 30 messages on it, 2 on each other leader, fewer in all than the rounds' 8 on every leader.
  model.ranks_per_cpu = 1;
  CHECK(algo::Selector(model, cluster, true).choose(64 << 10) == algo::Algorithm::kSharded);
  model.ranks_per_cpu = 32;
  const algo::Selector shared(model, cluster, true);
  CHECK(shared.choose(8) == algo::Algorithm::kSharded);
  CHECK(shared.choose(8 << 10) == algo::Algorithm::kHierarchical);
  CHECK(shared.choose(64 << 10) == algo::Algorithm::kHierarchical);
}

TEST_CASE("ranks per CPU: the most ranks on one rank's CPUs, per CPU, the same for every rank", "[topo]") {
  // 16 emulated nodes of 4 ranks on one 2-CPU host (mask 3: CPUs 0 and 1).
  CHECK(topo::ranks_per_cpu(std::vector<std::string>(64, "boot-a 3")) == Approx(32));
  // 8 ranks pinned a core each (mpirun --bind-to core): CPU r is bit r % 4 of hex digit r / 4.
  std::vector<std::string> pinned;
  for (int r = 0; r < 8; ++r) {
    std::string mask(static_cast<size_t>(r / 4 + 1), '0');
    mask[static_cast<size_t>(r / 4)] = "1248"[r % 4];
    pinned.push_back("boot-b " + mask);
  }
  CHECK(topo::ranks_per_cpu(pinned) == Approx(1));
  // 8 ranks free on a 96-CPU node, twice (two machines): each machine's ranks only.
  std::vector<std::string> two_nodes(8, "boot-c " + std::string(24, 'f'));
  two_nodes.insert(two_nodes.end(), 8, "boot-d " + std::string(24, 'f'));
  CHECK(topo::ranks_per_cpu(two_nodes) == Approx(8.0 / 96));
  // The most crowded rank sets it: on machine a, 3 ranks on CPUs 0-1 and 1 on CPUs 2-3 (two containers' CPU sets);
  // 1 rank on machine z's CPU 0, whose share names the same CPUs on another machine. Unreadable shares count nowhere.
  const std::vector<std::string> mixed = {"boot-a 3", "boot-a 3", "boot-z 1",  "boot-a c",
                                          "",         "garbage",  "boot-a 3x", "boot-a 3"};
  CHECK(topo::ranks_per_cpu(mixed) == Approx(1.5));
  CHECK(topo::ranks_per_cpu({"", "garbage"}) == Approx(1));
  // A share that overlaps two others counts both: CPUs 0-3 with ranks on 0-1 and 2-3.
  CHECK(topo::ranks_per_cpu({"boot-a f", "boot-a 3", "boot-a c"}) == Approx(1.0));  // 3 on CPUs 0-3, 2 on 0-1
  CHECK(topo::ranks_per_cpu({"boot-a f", "boot-a 3", "boot-a 3", "boot-a c"}) == Approx(1.5));
  // This process's own share reads back: alone, one rank over the CPUs of its affinity mask.
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const std::string share = topo::cpu_share();
  INFO(share);
  CHECK(topo::ranks_per_cpu({share}) == Approx(1.0 / CPU_COUNT(&set)));
  CHECK(topo::ranks_per_cpu({share, share, share}) == Approx(3.0 / CPU_COUNT(&set)));
}

TEST_CASE("a node is a host name on one boot with one /dev/shm: same-named containers apart are two nodes", "[topo]") {
  // Two machines whose containers were all started with --hostname trainer, two ranks on each.
  const std::string a = topo::node_identity("trainer", "1b0f6f3a-0000-4000-8000-00000000000a");
  const std::string b = topo::node_identity("trainer", "1b0f6f3a-0000-4000-8000-00000000000b");
  CHECK(a != b);
  Layout layout = Layout::from_node_ids({a, a, b, b}, 2);
  CHECK(layout.node_count == 2);
  CHECK(layout.local_rank == 0);
  CHECK(layout.local_size == 2);
  // Emulated nodes: one machine (one boot id), a host name per network namespace.
  CHECK(topo::node_identity("node0", "boot") != topo::node_identity("node1", "boot"));
  CHECK(topo::node_identity("node0", "boot") == topo::node_identity("node0", "boot"));
  // No boot id to read: the host name alone, as before.
  CHECK(topo::node_identity("trainer", "") == "trainer");
  // One machine, one host name, a /dev/shm each (containers without --ipc=host): two nodes; one /dev/shm: one.
  CHECK(topo::node_identity("trainer", "boot", "0:51") != topo::node_identity("trainer", "boot", "0:52"));
  CHECK(topo::node_identity("trainer", "boot", "0:51") == topo::node_identity("trainer", "boot", "0:51"));
  // This process's: its host name and this boot's id, which every process of the machine reads alike.
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string mine = topo::node_identity();
  CHECK(mine.rfind(std::string(host) + "/", 0) == 0);
  CHECK(mine.size() > std::string(host).size() + 30);  // a UUID after the name
  CHECK(mine == topo::node_identity());
  // /dev/shm's device after the machine's identity, which leaves it out.
  CHECK(mine.rfind(topo::host_identity() + "/shm:", 0) == 0);
}

TEST_CASE("the tuning table prints the model's times and the selector's choice at every size", "[select]") {
  algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  model.net = {30, 1.0};
  model.shm = {2, 20.0};
  for (bool hierarchy : {true, false}) {
    Layout layout = Layout::from_node_ids(nodes_of(2, 2), 0);
    algo::Selector selector(model, layout, hierarchy);
    std::istringstream table(selector.tuning_table());
    std::string line;
    std::getline(table, line);  // title
    std::getline(table, line);  // column names
    size_t expected = 8;
    int rows = 0;
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      size_t bytes = 0;
      std::string ring, rd, hier, sharded, chosen;
      fields >> bytes >> ring >> rd >> hier >> sharded >> chosen;
      INFO(line);
      CHECK(bytes == expected);
      const double size = static_cast<double>(bytes);
      CHECK(std::stod(ring) == Approx(model.ring(size, layout) * 1e6).epsilon(0.01).margin(0.06));
      CHECK(std::stod(rd) == Approx(model.recursive_doubling(size, layout) * 1e6).epsilon(0.01).margin(0.06));
      if (hierarchy) {
        CHECK(std::stod(hier) == Approx(model.hierarchical(size, layout) * 1e6).epsilon(0.01).margin(0.06));
      } else {
        CHECK(hier == "-");
      }
      CHECK(chosen == algo::to_string(selector.choose(bytes)));
      expected *= 8;
      ++rows;
    }
    CHECK(rows == 9);  // 8 B .. 128 MB by factors of 8
  }
}

// hwloc failing to read the machine (forced: HWLOC_COMPONENTS=stop makes its discovery fail, read by hwloc at each
// topology's init) leaves the layout unknown, with a warning, and releases the topology on that path: no
// descriptor kept over many tries (and the sanitizer build's leak check sees its memory).
TEST_CASE("a machine hwloc cannot read is reported unknown and nothing is kept", "[topo]") {
  const MachineInfo real = detect_machine();
  CHECK(real.cores > 0);
  const char* saved = std::getenv("HWLOC_COMPONENTS");
  const std::string restore = saved ? saved : "";
  setenv("HWLOC_COMPONENTS", "stop", 1);
  const int fds = hiercoll::test::open_fds();
  MachineInfo failed;
  for (int i = 0; i < 50; ++i) failed = detect_machine();
  const int fds_after = hiercoll::test::open_fds();
  if (saved) {
    setenv("HWLOC_COMPONENTS", restore.c_str(), 1);
  } else {
    unsetenv("HWLOC_COMPONENTS");
  }
  CHECK(failed.cores == 0);
  CHECK(failed.gpus.empty());
  CHECK(failed.describe().find("0 cores") == 0);
  CHECK(fds_after == fds);
}

// The selector remembers its answers for recent sizes: whatever the order of the calls (entries replaced, sizes
// that share an entry), it answers what the cost model answered the first time it was asked.
TEST_CASE("the selector's remembered choices are the cost model's", "[topo]") {
  algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  model.net = {30, 1.0};
  model.shm = {2, 20.0};
  for (bool hierarchy : {false, true}) {
    algo::Selector selector(model, Layout::from_node_ids(nodes_of(3, 4), 5), hierarchy);
    std::vector<size_t> sizes;
    for (size_t bytes = 1; bytes <= (size_t{1} << 28); bytes = bytes * 3 / 2 + 1) sizes.push_back(bytes);
    std::vector<algo::Algorithm> first;
    for (size_t bytes : sizes) first.push_back(selector.choose(bytes));  // each size new: the model's answer
    CHECK(std::set<algo::Algorithm>(first.begin(), first.end()).size() >= 2);  // crossovers inside the range
    std::mt19937 rng(3);
    for (int i = 0; i < 20000; ++i) {
      const size_t k = rng() % sizes.size();
      REQUIRE(selector.choose(sizes[k]) == first[k]);
    }
  }
}

// The selector's table (algo::choices) and the engine's (engine/schedules.cpp) describe the same pairs: an
// algorithm the selector can choose for a kind has a row saying how to run it, and no schedule is left that
// nothing chooses.
TEST_CASE("every algorithm the selector can choose has a schedule, and every schedule is chosen somewhere",
          "[select]") {
  std::set<std::pair<int, int>> chosen;
  for (const algo::Choice& c : algo::choices()) {
    INFO(algo::to_string(c.kind) << " by " << algo::to_string(c.algorithm));
    CHECK_NOTHROW(engine::schedule_of(c.algorithm, c.kind));
    CHECK(chosen.insert({static_cast<int>(c.algorithm), static_cast<int>(c.kind)}).second);  // one row each
    CHECK(std::string(algo::to_string(c.algorithm)) != "?");
  }
  int pairs = 0;
  for (int a = 0; a < static_cast<int>(algo::kAlgorithmCount); ++a) {
    for (int k = static_cast<int>(algo::Kind::kAllreduce); k < static_cast<int>(algo::kKindSlots); ++k) {
      const auto algorithm = static_cast<algo::Algorithm>(a);
      const auto kind = static_cast<algo::Kind>(k);
      INFO(algo::to_string(kind) << " by " << algo::to_string(algorithm));
      if (chosen.count({a, k})) {
        ++pairs;
      } else {
        CHECK_THROWS_AS(engine::schedule_of(algorithm, kind), InternalError);
      }
    }
  }
  CHECK(pairs == static_cast<int>(algo::choices().size()));
  // Every kind can be run in every situation: its last row is always eligible.
  const Layout layout = Layout::from_node_ids(nodes_of(2, 2), 0);
  for (int k = static_cast<int>(algo::Kind::kAllreduce); k < static_cast<int>(algo::kKindSlots); ++k) {
    for (bool ready : {false, true}) {
      for (bool device : {false, true}) {
        const algo::Situation s{&layout, ready, device, false};
        bool any = false;
        for (const algo::Choice& c : algo::choices()) any = any || (static_cast<int>(c.kind) == k && c.eligible(s));
        CHECK(any);
      }
    }
  }
}

// The selector keeps the other kinds' choices from construction; each is the kind's first eligible row.
TEST_CASE("every kind but allreduce takes its first eligible row, on host and device buffers", "[select]") {
  const algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  for (int nodes : {1, 2}) {
    const Layout layout = Layout::from_node_ids(nodes_of(nodes, 2), 0);
    for (bool ready : {false, true}) {
      for (const char* forced : {"", "ring", "sharded"}) {
        const algo::Selector selector(model, layout, ready, forced);
        for (int k = static_cast<int>(algo::Kind::kReduceScatter); k <= static_cast<int>(algo::Kind::kBarrier); ++k) {
          for (bool device : {false, true}) {
            const algo::Situation s{&layout, ready, device, selector.flat_forced()};
            const algo::Choice* first = nullptr;
            for (const algo::Choice& c : algo::choices()) {
              if (first == nullptr && static_cast<int>(c.kind) == k && c.eligible(s)) first = &c;
            }
            INFO(nodes << " nodes, hierarchy " << ready << ", HIERCOLL_ALGO=" << forced << ", kind " << k << ", device "
                       << device);
            REQUIRE(first != nullptr);
            CHECK(selector.choose(static_cast<algo::Kind>(k), 4096, device) == first->algorithm);
          }
        }
      }
    }
  }
  // On one node with its structure, the node algorithms; broadcast on device buffers keeps to the chain.
  const Layout one_node = Layout::from_node_ids(nodes_of(1, 4), 0);
  const algo::Selector selector(model, one_node, true);
  CHECK(selector.choose(algo::Kind::kAllgather, 8, false) == algo::Algorithm::kNode);
  CHECK(selector.choose(algo::Kind::kBroadcast, 8, false) == algo::Algorithm::kNode);
  CHECK(selector.choose(algo::Kind::kBroadcast, 8, true) == algo::Algorithm::kChain);
  CHECK_THROWS_AS(selector.choose(static_cast<algo::Kind>(99), 8, false), InvalidUsageError);
}

TEST_CASE("HIERCOLL_ALGO's names are the table's forceable rows, each read back as itself", "[select]") {
  const std::string names = algo::forceable_names();
  CHECK(names == "ring, rd, hier, sharded");
  for (algo::Algorithm a : {algo::Algorithm::kRing, algo::Algorithm::kRecursiveDoubling, algo::Algorithm::kHierarchical,
                            algo::Algorithm::kSharded}) {
    CHECK(algo::forced_algorithm(algo::to_string(a)) == a);
  }
  CHECK_THROWS_WITH(algo::forced_algorithm("node"), Catch::Contains("ring, rd, hier, sharded"));
  CHECK_THROWS_AS(algo::forced_algorithm(""), InvalidUsageError);
}

// The hierarchical allreduce's form is decided in one place (hier_variant), which both the algorithm and the cost
// model read: the model prices local rank 0 alone crossing the network exactly where the algorithm does that.
TEST_CASE("the cost model prices the hierarchical allreduce in the form the algorithm takes", "[select]") {
  using algo::HierVariant;
  const size_t area = 512 << 10;
  CHECK(algo::hier_variant(4, 1, false, area, 8) == HierVariant::kNetworkOnly);
  CHECK(algo::hier_variant(1, 4, false, area, algo::kOneShotBytes) == HierVariant::kOneShot);
  CHECK(algo::hier_variant(1, 4, true, area, algo::kOneShotBytes) == HierVariant::kOneShot);  // device too
  CHECK(algo::hier_variant(1, 4, false, area, algo::kOneShotBytes + 1) == HierVariant::kPipelined);
  CHECK(algo::hier_variant(2, 4, false, area, algo::kLeaderBytes) == HierVariant::kLeader);
  CHECK(algo::hier_variant(2, 4, false, area, algo::kLeaderBytes + 1) == HierVariant::kPipelined);
  CHECK(algo::hier_variant(2, 4, false, area, 0) == HierVariant::kPipelined);
  CHECK(algo::hier_variant(2, 4, true, area, 1024) == HierVariant::kPipelined);         // device: every rail
  CHECK(algo::hier_variant(2, 4, false, 4 << 10, 8 << 10) == HierVariant::kPipelined);  // past one area
  CHECK(algo::hier_variant(2, 4, false, 4 << 10, 4 << 10) == HierVariant::kLeader);

  // Where ranks share cores, one message per node pair (the leader) costs less CPU than one per rail: the model's
  // host figure is below its device figure at a leader's size, and equal past it.
  algo::CostModel model = algo::CostModel::from(base::Settings::defaults());
  model.net = {1, 10, 20};  // each message's CPU overhead far above the link's latency
  model.ranks_per_cpu = 2;
  const Layout two_by_four = Layout::from_node_ids(nodes_of(2, 4), 0);
  CHECK(model.hierarchical(4096, two_by_four, false) < model.hierarchical(4096, two_by_four, true));
  CHECK(model.hierarchical(1 << 20, two_by_four, false) == Approx(model.hierarchical(1 << 20, two_by_four, true)));
  // And not past one area of peer memory, where the algorithm pipelines even a small message.
  model.shm_piece_bytes = 1024;
  CHECK(model.hierarchical(4096, two_by_four, false) == Approx(model.hierarchical(4096, two_by_four, true)));
}
