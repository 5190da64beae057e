// The node-aware algorithms on in-process ranks: emulated nodes whose local ranks share a real NodeArena (shared
// memory, here within one process) and a HostQueue each, the inter-node phase over the in-process fabric, as the
// engine wires them for host buffers (engine/collective.cpp). Each rank's output is compared with a serial
// reference, with and without delays and reordering on the network, and a rank killed mid-run must make every
// survivor fail within its deadline.
#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <string>

#include "algo/background.hpp"
#include "algo/hierarchy.hpp"
#include "algo/network_stage.hpp"
#include "device/host_queue.hpp"
#include "hiercoll/topology.hpp"
#include "ranks.hpp"
#include "transport/shm/node_arena.hpp"

using namespace hiercoll;
using namespace hiercoll::test;

namespace {

/// What the engine prepares once per communicator for the node-aware algorithms, for every emulated rank.
struct EmulatedNodes {
  std::vector<std::unique_ptr<transport::NodeArena>> arenas;  // by rank
  std::vector<std::unique_ptr<device::HostQueue>> queues;
  std::vector<std::unique_ptr<algo::BackgroundWorker>> workers;
  std::vector<algo::NodeMemory> memory;
  std::vector<algo::Hierarchy> hierarchy;

  /// `node_of[r]`: rank r's node. Shared-memory areas of `area_bytes` (small: many pieces per operation);
  /// the inter-node phase uses recursive doubling up to `small_message_bytes`, the ring above.
  EmulatedNodes(const std::vector<int>& node_of, size_t area_bytes, size_t small_message_bytes) {
    const int n = static_cast<int>(node_of.size());
    std::vector<std::string> ids;
    for (int node : node_of) ids.push_back("node" + std::to_string(node));
    arenas.resize(static_cast<size_t>(n));
    std::vector<std::string> names;
    for (int r = 0; r < n; ++r) {
      const Layout layout = Layout::from_node_ids(ids, r);
      if (layout.local_rank != 0) continue;  // makers first: the others attach to what they made
      arenas[r] = transport::NodeArena::create("inproc-" + std::to_string(layout.node), layout.local_size,
                                               algo::kHierBufferSets, area_bytes);
    }
    for (int r = 0; r < n; ++r) {
      const Layout layout = Layout::from_node_ids(ids, r);
      if (layout.local_rank != 0) {
        const int maker = layout.rank_at(layout.node, 0);
        arenas[r] = transport::NodeArena::attach(arenas[maker]->name(), layout.local_rank, layout.local_size,
                                                 algo::kHierBufferSets, area_bytes);
      }
      queues.push_back(std::make_unique<device::HostQueue>());
      workers.push_back(std::make_unique<algo::BackgroundWorker>());
      algo::NodeMemory m;
      m.peers = arenas[r].get();
      m.queue = queues.back().get();
      memory.push_back(m);
      algo::Hierarchy h;
      for (int node = 0; node < layout.node_count; ++node) h.rail.push_back(layout.rank_at(node, layout.local_rank));
      h.node = layout.node;
      h.local_rank = layout.local_rank;
      h.local_size = layout.local_size;
      h.small_message_bytes = small_message_bytes;
      h.network = workers.back().get();
      hierarchy.push_back(h);
    }
    for (auto& arena : arenas) arena->unlink();  // everyone attached: no name left behind, whatever happens next
  }

  void allreduce(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op,
                 algo::InterNode inter = algo::InterNode::kRail) {
    const size_t r = static_cast<size_t>(ch.rank());
    algo::HelperStage network(*hierarchy[r].network, ch);
    algo::allreduce_hier(algo::OpContext::of(ch), hierarchy[r], memory[r], network, in, out, count, type, op, inter);
  }
};

struct Shape {
  const char* name;
  std::vector<int> node_of;
};

const std::vector<Shape> kShapes = {
    {"1x2", {0, 0}},
    {"1x4", {0, 0, 0, 0}},
    {"2x1", {0, 1}},
    {"2x2", {0, 0, 1, 1}},
    {"3x2", {0, 0, 1, 1, 2, 2}},
    {"2x3", {0, 0, 0, 1, 1, 1}},
    {"interleaved 2x2", {0, 1, 0, 1}},
    {"4x4", {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}},
    {"8x2", {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7}},
    {"2x8", {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}},
};

// Empty, one, fewer than ranks, not divisible, below and above the small-message switch, many pieces.
const std::vector<size_t> kCounts = {0, 1, 5, 97, 1000, 5003};

}  // namespace

const char* name_of(algo::InterNode inter) {
  return inter == algo::InterNode::kRail ? "rail rings" : "sharded servers";
}

TEST_CASE("hierarchical allreduce on emulated node layouts equals the serial reference", "[inproc][hier]") {
  auto inter = GENERATE(algo::InterNode::kRail, algo::InterNode::kSharded);
  for (const Shape& shape : kShapes) {
    const int n = static_cast<int>(shape.node_of.size());
    for (int variant = 0; variant < 3; ++variant) {
      EmulatedNodes nodes(shape.node_of, /*area_bytes=*/1024, /*small_message_bytes=*/1024);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        for (size_t count : kCounts) {
          if (variant > 0 && count > 1000) continue;  // delays make long runs slow; short ones suffice for order
          INFO(shape.name << " with " << name_of(inter) << ", count " << count << ", " << to_string(op) << ", faults "
                          << variant);
          std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count, -99.f));
          auto results = run_ranks(n, faults_for(variant), std::chrono::seconds(30), [&](Channel& ch) {
            std::vector<float> in(count);
            for (size_t i = 0; i < count; ++i) in[i] = input(ch.rank(), i);
            nodes.allreduce(ch, in.data(), out[static_cast<size_t>(ch.rank())].data(), count, DataType::kFloat32, op,
                            inter);
          });
          require_all_ok(results);
          for (size_t i = 0; i < count; ++i) {
            const float expected = reduced_input(n, i, op);
            for (int r = 0; r < n; ++r) REQUIRE(out[static_cast<size_t>(r)][i] == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("node reduce-scatter, allgather, allreduce and broadcast through shared memory equal the serial reference",
          "[inproc][hier]") {
  for (int local : {1, 2, 3, 4, 8}) {
    const std::vector<int> node_of(static_cast<size_t>(local), 0);
    EmulatedNodes nodes(node_of, /*area_bytes=*/512, /*small_message_bytes=*/0);
    for (size_t block : {size_t{0}, size_t{1}, size_t{7}, size_t{300}}) {
      const size_t total = block * static_cast<size_t>(local);
      INFO("local ranks " << local << ", block " << block);
      std::vector<std::vector<float>> scattered(static_cast<size_t>(local)), gathered(static_cast<size_t>(local));
      // [rank][root]: a broadcast of `total` floats (several rounds at block 300; in the flag's line at a few) and
      // one of 5 (always in the flag's line), every rank root in turn; the root's own in place.
      const size_t L = static_cast<size_t>(local);
      std::vector<std::vector<std::vector<float>>> whole(L, std::vector<std::vector<float>>(L)), few = whole;
      std::vector<std::vector<float>> summed(L), averaged(L);
      auto results = run_ranks(local, faults_for(0), std::chrono::seconds(30), [&](Channel& ch) {
        const size_t r = static_cast<size_t>(ch.rank());
        std::vector<float> in(total);
        for (size_t i = 0; i < total; ++i) in[i] = input(ch.rank(), i);
        scattered[r].assign(block, -99.f);
        algo::reduce_scatter_node(algo::OpContext::of(ch), nodes.memory[r], in.data(), scattered[r].data(), block,
                                  DataType::kFloat32, ReduceOp::kSum);
        gathered[r].assign(total, -99.f);
        algo::allgather_node(algo::OpContext::of(ch), nodes.memory[r], in.data() + r * block, gathered[r].data(), block,
                             DataType::kFloat32);
        // A pipelined allreduce (many pieces at block 300) just before the broadcasts, whose root stages a round
        // while others may still be reading the allreduce's last pieces. Each rank's shard is reduced into its area
        // and its output in one pass, as a share of 16 KB or more goes.
        nodes.hierarchy[r].output_share_bytes = 0;
        summed[r].assign(total, -99.f);
        nodes.allreduce(ch, in.data(), summed[r].data(), total, DataType::kFloat32, ReduceOp::kSum);
        // An average the way a message as large as the last-level cache (or a small share) goes: reduced into the
        // areas alone, each rank's own shard copied out after the others' (and divided once, there).
        nodes.hierarchy[r].cached_output_bytes = 0;
        averaged[r].assign(total, -99.f);
        nodes.allreduce(ch, in.data(), averaged[r].data(), total, DataType::kFloat32, ReduceOp::kAvg);
        nodes.hierarchy[r].cached_output_bytes = SIZE_MAX;
        for (int root = 0; root < local; ++root) {
          std::vector<float>& all = whole[r][static_cast<size_t>(root)];
          all.assign(total, -99.f);
          if (ch.rank() == root) all = in;
          algo::broadcast_node(algo::OpContext::of(ch), nodes.memory[r], all.data(), all.data(), total * sizeof(float),
                               root);
          std::vector<float>& some = few[r][static_cast<size_t>(root)];
          some.assign(5, -99.f);
          algo::broadcast_node(algo::OpContext::of(ch), nodes.memory[r], in.data() + (total > 5 ? 1 : 0), some.data(),
                               std::min<size_t>(5, total) * sizeof(float), root);
        }
      });
      require_all_ok(results);
      for (int r = 0; r < local; ++r) {
        const size_t rr = static_cast<size_t>(r);
        for (size_t i = 0; i < block; ++i) {
          REQUIRE(scattered[rr][i] == reduced_input(local, rr * block + i, ReduceOp::kSum));
        }
        for (size_t i = 0; i < total; ++i) REQUIRE(gathered[rr][i] == input(static_cast<int>(i / block), i));
        for (size_t i = 0; i < total; ++i) REQUIRE(summed[rr][i] == reduced_input(local, i, ReduceOp::kSum));
        for (size_t i = 0; i < total; ++i) {
          REQUIRE(averaged[rr][i] == reduced_input(local, i, ReduceOp::kSum) / static_cast<float>(local));
        }
        for (int root = 0; root < local; ++root) {
          const size_t at = total > 5 ? 1 : 0;
          for (size_t i = 0; i < total; ++i) REQUIRE(whole[rr][static_cast<size_t>(root)][i] == input(root, i));
          for (size_t i = 0; i < 5; ++i) {
            const float expected = i < std::min<size_t>(5, total) ? input(root, at + i) : -99.f;
            REQUIRE(few[rr][static_cast<size_t>(root)][i] == expected);
          }
        }
      }
    }
  }
}

// No rank leaves a node barrier before every local rank has entered it: each rank counts itself in before barrier k,
// after a delay that differs by rank and round (the last to arrive changes), and reads the count after it. Barriers
// between other node collectives keep their place in the flag rounds.
TEST_CASE("a node barrier lets no rank through before every local rank arrived", "[inproc][hier]") {
  for (int local : {2, 3, 8}) {
    const std::vector<int> node_of(static_cast<size_t>(local), 0);
    EmulatedNodes nodes(node_of, /*area_bytes=*/512, /*small_message_bytes=*/0);
    constexpr int kRounds = 20;
    std::vector<std::atomic<int>> arrived(kRounds);
    std::vector<std::vector<int>> seen(static_cast<size_t>(local), std::vector<int>(kRounds, -1));
    std::vector<std::vector<float>> gathered(static_cast<size_t>(local));
    std::atomic<int> wrong{0};  // allgathered values that differ from the ranks' (checked here, not in their threads)
    auto results = run_ranks(local, faults_for(0), std::chrono::seconds(30), [&](Channel& ch) {
      const size_t r = static_cast<size_t>(ch.rank());
      for (int k = 0; k < kRounds; ++k) {
        if ((ch.rank() + k) % local == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        arrived[static_cast<size_t>(k)].fetch_add(1);
        algo::barrier_node(algo::OpContext::of(ch), nodes.memory[r]);
        seen[r][static_cast<size_t>(k)] = arrived[static_cast<size_t>(k)].load();
        if (k % 5 == 4) {  // another node collective in between
          const float mine = static_cast<float>(ch.rank() + k);
          gathered[r].assign(static_cast<size_t>(local), -1.f);
          algo::allgather_node(algo::OpContext::of(ch), nodes.memory[r], &mine, gathered[r].data(), 1,
                               DataType::kFloat32);
          for (int q = 0; q < local; ++q) wrong += gathered[r][static_cast<size_t>(q)] != static_cast<float>(q + k);
        }
      }
    });
    require_all_ok(results);
    CHECK(wrong == 0);
    for (int r = 0; r < local; ++r) {
      for (int k = 0; k < kRounds; ++k) {
        INFO("local ranks " << local << ", rank " << r << ", barrier " << k);
        CHECK(seen[static_cast<size_t>(r)][static_cast<size_t>(k)] == local);
      }
    }
  }
}

TEST_CASE("small broadcasts through the roots' rings stay right when roots run many calls ahead", "[inproc][hier]") {
  // Broadcasts of up to a flag line's payload go through the root's ring of K entries, and a root waits for no one
  // until its ring is full: ranks of one node run up to K broadcasts apart. Many times K of them, the size changing
  // every call and the root every K + 8 calls, now and then an allreduce through the rounds in between (their own
  // rotation), and the readers slowed down at random, so the ring wraps with readers at every distance behind.
  const int K = transport::NodeArena::kRingLines;
  const int calls = 8 * K + 5;
  for (int local : {2, 3, 4}) {
    INFO("local ranks " << local);
    const std::vector<int> node_of(static_cast<size_t>(local), 0);
    EmulatedNodes nodes(node_of, /*area_bytes=*/512, /*small_message_bytes=*/0);
    const size_t max_floats = nodes.arenas[0]->flag_payload_bytes() / sizeof(float);
    auto root_of = [&](int call) { return (call / (K + 8)) % local; };
    auto size_of = [&](int call) { return static_cast<size_t>(call * 13 % static_cast<int>(max_floats + 1)); };
    std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(local));
    auto results = run_ranks(local, faults_for(0), std::chrono::seconds(60), [&](Channel& ch) {
      const size_t r = static_cast<size_t>(ch.rank());
      got[r].resize(static_cast<size_t>(calls));
      std::minstd_rand slow(static_cast<unsigned>(r + 1));
      for (int call = 0; call < calls; ++call) {
        const int root = root_of(call);
        const size_t n = size_of(call);
        std::vector<float> in(n);
        for (size_t i = 0; i < n; ++i) in[i] = input(root, static_cast<size_t>(call) * 100 + i);
        std::vector<float>& out = got[r][static_cast<size_t>(call)];
        out.assign(n, -99.f);
        algo::broadcast_node(algo::OpContext::of(ch), nodes.memory[r], in.data(), out.data(), n * sizeof(float), root);
        if (call % (3 * K + 1) == 3 * K) {
          std::vector<float> sum(7);
          nodes.allreduce(ch, in.data(), sum.data(), std::min<size_t>(n, 7), DataType::kFloat32, ReduceOp::kSum);
        }
        if (ch.rank() != root && slow() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(slow() % 500));
      }
    });
    require_all_ok(results);
    for (int r = 0; r < local; ++r) {
      for (int call = 0; call < calls; ++call) {
        const std::vector<float>& out = got[static_cast<size_t>(r)][static_cast<size_t>(call)];
        REQUIRE(out.size() == size_of(call));
        for (size_t i = 0; i < out.size(); ++i) {
          if (out[i] != input(root_of(call), static_cast<size_t>(call) * 100 + i)) {
            FAIL("rank " << r << " call " << call << " (root " << root_of(call) << ") element " << i);
          }
        }
      }
    }
  }
}

namespace {

// A rank's peer memory whose single-copy reads a test can refuse, as a seccomp filter or ptrace rules would.
class RefusingPeers final : public transport::PeerMemory {
 public:
  explicit RefusingPeers(transport::PeerMemory& inner) : inner_(inner) {}
  bool refuse = false;
  int reads = 0;  // direct reads asked for
  int local_rank() const override { return inner_.local_rank(); }
  int local_size() const override { return inner_.local_size(); }
  int slots() const override { return inner_.slots(); }
  size_t area_bytes() const override { return inner_.area_bytes(); }
  uint8_t* area(int slot, int owner) const override { return inner_.area(slot, owner); }
  uint64_t* flag(transport::FlagKind kind, int slot, int owner) const override {
    return inner_.flag(kind, slot, owner);
  }
  size_t flag_payload_bytes() const override { return inner_.flag_payload_bytes(); }
  int ring_lines() const override { return inner_.ring_lines(); }
  uint64_t* ring_line(int owner, int index) const override { return inner_.ring_line(owner, index); }
  uint64_t* ring_read(int reader) const override { return inner_.ring_read(reader); }
  uint64_t direct_token() const override { return inner_.direct_token(); }
  bool direct_read(uint64_t token, void* to, const void* from, size_t bytes) const override {
    ++const_cast<RefusingPeers*>(this)->reads;
    return !refuse && inner_.direct_read(token, to, from, bytes);
  }

 private:
  transport::PeerMemory& inner_;
};

}  // namespace

TEST_CASE("node allgathers and broadcasts read the peers' buffers once, and stage on every rank if one is refused",
          "[inproc][hier]") {
  for (int local : {2, 3, 4}) {
    for (int refusing : {-1, local - 1}) {  // no rank, or the last one, has its reads refused
      INFO("local ranks " << local << ", refused reads on rank " << refusing);
      const std::vector<int> node_of(static_cast<size_t>(local), 0);
      EmulatedNodes nodes(node_of, /*area_bytes=*/512, /*small_message_bytes=*/0);
      const size_t L = static_cast<size_t>(local);
      std::vector<std::unique_ptr<RefusingPeers>> peers;
      for (size_t r = 0; r < L; ++r) {
        peers.push_back(std::make_unique<RefusingPeers>(*nodes.arenas[r]));
        peers[r]->refuse = static_cast<int>(r) == refusing;
        nodes.memory[r].peers = peers[r].get();
        nodes.memory[r].direct_bytes = 256;  // blocks of 300 floats go direct, 5 floats ride in the flag line
      }
      const int calls = 4;
      // [rank][call]: an allgather of 300 floats a rank (3 rounds of the 512-byte area when staged, one round direct),
      // one of them in place, and a broadcast of them from a root that changes every call; after each call the rank
      // changes its input, which peers must have finished reading by then.
      std::vector<std::vector<std::vector<float>>> gathered(L, std::vector<std::vector<float>>(calls)),
          whole = gathered;
      std::vector<std::vector<uint64_t>> rounds(L, std::vector<uint64_t>(calls)), broadcast_rounds = rounds;
      auto results = run_ranks(local, faults_for(0), std::chrono::seconds(30), [&](Channel& ch) {
        const size_t r = static_cast<size_t>(ch.rank());
        for (int call = 0; call < calls; ++call) {
          const size_t block = 300, total = block * L;
          std::vector<float> in(block);
          for (size_t i = 0; i < block; ++i) in[i] = input(ch.rank(), r * block + i + static_cast<size_t>(call));
          const uint64_t before = nodes.memory[r].pieces_done;
          std::vector<float>& all = gathered[r][static_cast<size_t>(call)];
          all.assign(total, -99.f);
          if (call == 1) {  // in place: the input is this rank's block of the output
            std::copy(in.begin(), in.end(), all.begin() + static_cast<std::ptrdiff_t>(r * block));
            algo::allgather_node(algo::OpContext::of(ch), nodes.memory[r], all.data() + r * block, all.data(), block,
                                 DataType::kFloat32);
          } else {
            algo::allgather_node(algo::OpContext::of(ch), nodes.memory[r], in.data(), all.data(), block,
                                 DataType::kFloat32);
          }
          rounds[r][static_cast<size_t>(call)] = nodes.memory[r].pieces_done - before;
          const int root = call % local;
          std::vector<float>& got = whole[r][static_cast<size_t>(call)];
          got.assign(block, -99.f);
          const uint64_t before_broadcast = nodes.memory[r].pieces_done;
          algo::broadcast_node(algo::OpContext::of(ch), nodes.memory[r], in.data(), got.data(), block * sizeof(float),
                               root);
          broadcast_rounds[r][static_cast<size_t>(call)] = nodes.memory[r].pieces_done - before_broadcast;
          in.assign(block, -1.f);  // the caller may change its buffer as soon as the call returns
        }
      });
      require_all_ok(results);
      for (size_t r = 0; r < L; ++r) {
        for (int call = 0; call < calls; ++call) {
          const size_t c = static_cast<size_t>(call), block = 300;
          for (size_t i = 0; i < block * L; ++i) {
            REQUIRE(gathered[r][c][i] == input(static_cast<int>(i / block), i + c));
          }
          const int root = call % local;
          for (size_t i = 0; i < block; ++i) {
            REQUIRE(whole[r][c][i] == input(root, static_cast<size_t>(root) * block + i + c));
          }
          // Direct: one round an allgather; after a refusal every rank stages (3 rounds of the area) from then on.
          REQUIRE(rounds[r][c] == (refusing < 0 ? 1u : call == 0 ? 4u : 3u));
          REQUIRE(broadcast_rounds[r][c] == (refusing < 0 ? 1u : 3u));
        }
        CHECK(nodes.memory[r].direct_bytes == (refusing < 0 ? 256u : 0u));
        CHECK(peers[r]->reads > 0);
      }
    }
  }
}

TEST_CASE("a rank killed mid-way through hierarchical allreduces makes every survivor fail in time", "[inproc][hier]") {
  const std::vector<int> node_of = {0, 0, 1, 1, 2, 2};
  const int n = static_cast<int>(node_of.size());
  auto inter = GENERATE(algo::InterNode::kRail, algo::InterNode::kSharded);
  for (int victim : {1, 2}) {  // a node's second rank, and a node's first
    INFO("victim rank " << victim << ", " << name_of(inter));
    EmulatedNodes nodes(node_of, 1024, 1024);
    const std::vector<float> in(4000, 1.f);
    survivors_fail_after_kill(n, victim, [&](Channel& ch) {
      std::vector<float> out(in.size());
      nodes.allreduce(ch, in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum, inter);
    });
  }
}

TEST_CASE("a hierarchical allreduce whose pieces number more than 65536 steps stays right", "[inproc][hier][wrap]") {
  // Each piece's network phase gets its own range of steps (allreduce_hier.cpp), a few dozen steps for these
  // 1 KB areas, so a few thousand pieces pass the tags' 16-bit wrap several times.
  const std::vector<int> node_of = {0, 0, 1, 1};
  const int n = static_cast<int>(node_of.size());
  const size_t count = 2'000'003;
  EmulatedNodes nodes(node_of, /*area_bytes=*/1024, /*small_message_bytes=*/1024);
  std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count, -99.f));
  auto results = run_ranks(n, faults_for(0), std::chrono::seconds(120), [&](Channel& ch) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = input(ch.rank(), i);
    nodes.allreduce(ch, in.data(), out[static_cast<size_t>(ch.rank())].data(), count, DataType::kFloat32,
                    ReduceOp::kSum);
  });
  require_all_ok(results);
  for (size_t i = 0; i < count; ++i) {
    const float expected = reduced_input(n, i, ReduceOp::kSum);
    for (int r = 0; r < n; ++r) {
      if (out[static_cast<size_t>(r)][i] != expected) FAIL("rank " << r << " element " << i);
    }
  }
}
