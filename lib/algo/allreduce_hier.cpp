// Hierarchical allreduce for N nodes x L ranks, in pieces of the peer memory's area size:
//   (1) intra-node reduce-scatter: each rank stages its piece in its own area and signals it; once every
//       local rank has, it reduces shard `local_rank` of the piece over all L areas (in local-rank order): a
//       round of the node reduce-scatter (node_reduce_round, node_collectives.cpp);
//   (2) inter-node allreduce of that shard among the ranks with the same local rank (one rail per local
//       rank, so all L ranks and the node's NICs work in parallel, each on 1/L of the data; a rank with several
//       NICs stripes its messages over them, transport/striped_endpoint.hpp): a ring, or
//       SageMaker's sharded reduction servers (every node serves 1/N of the shard: two network steps);
//   (3) intra-node allgather: each rank publishes its finished shard in its area and signals it; once every
//       local rank has, it copies the other L-1 shards out (node_gather_round).
// The same schedule runs on host memory (shared memory, HostQueue: each step runs as it is issued) and on
// device memory (CUDA IPC, CudaQueue: steps are enqueued on a stream and the flags are waited for on the
// device, so no host round trip separates the intra-node steps). For device memory the inter-node phase
// works on a pinned host copy of the shard (staged out after (1), back in before (3)).
// Phase (2) of each piece goes to a NetworkStage (network_stage.hpp): on host memory it runs on the helper
// thread while this thread issues the reduce-scatter of piece p+1 and then the allgather of piece p-1; on
// device memory every step is enqueued at once and the host runs phase (2) piece by piece as the device
// hands pieces over. Either way the pipeline is the same.
// Pieces rotate through three slots, each with its own flags. A rank overwrites slot s for piece p+3 only
// after the reduce-scatter wait of piece p+2, which every local rank signals only after copying out piece p.
// The rotation and the flags' generations run on across operations (NodeMemory::pieces_done), since a fast
// rank may begin the next allreduce while a slow one still copies out the last piece of this one.
#include <algorithm>

#include "algo/algorithms.hpp"
#include "algo/hierarchy.hpp"
#include "algo/network_stage.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {
namespace {

using transport::kFlagPublished;

void inter_node_allreduce(Channel& rail, const Hierarchy& h, InterNode inter, void* data, size_t count, DataType type,
                          ReduceOp op) {
  if (rail.size() == 1 || count == 0) return;
  if (inter == InterNode::kSharded) {
    allreduce_sharded(rail, data, data, count, type, op);
  } else if (count * dtype_size(type) <= h.small_message_bytes) {
    allreduce_recursive_doubling(rail, data, data, count, type, op);
  } else {
    allreduce_ring(rail, data, data, count, type, op);
  }
}

// The inter-node phase of a whole buffer over this rank's rail, averaged at the end where `op` asks: what a rank
// alone on its node, or a node's leader, runs.
NetworkStage::Job whole_over_rail(const Hierarchy& h, InterNode inter, void* out, size_t count, DataType type,
                                  ReduceOp op, int world) {
  return [&h, inter, out, count, type, op, world](Channel& ch) {
    Channel rail = ch.subgroup(h.rail, h.node, 0);
    inter_node_allreduce(rail, h, inter, out, count, type, op == ReduceOp::kAvg ? ReduceOp::kSum : op);
    if (op == ReduceOp::kAvg) reduce::divide(out, count, type, world);
  };
}

}  // namespace

void allreduce_one_shot(NodeMemory& m, const device::WaitContext& wait, const void* in, void* out, size_t count,
                        DataType type, ReduceOp op, int world) {
  // One flag round instead of two. Every rank reduces all L areas itself, in local-rank order (so every rank's
  // result is the same bits). The slot rotation stays safe: a rank signals round p+1 only after its reads of round
  // p. The rotation and generations are allreduce_hier's (pieces_done), so ranks may mix the two freely.
  const size_t bytes = count * dtype_size(type);
  transport::PeerMemory& peers = *m.peers;
  const bool in_line = bytes <= peers.flag_payload_bytes();
  const NodeRound r = node_round(m, 0, in_line ? 0 : bytes);
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (in_line) {
    // A few elements ride in the flag's own cache line: a peer's wait that sees the flag has the data too, where
    // reading an area would be a second transfer of a line the owner just wrote (2 ranks, 8 B: two of the four
    // transfers a call makes).
    const int L = peers.local_size();
    node_flag_round(m, r, node_signature(0, count, type, op), wait, in, bytes);
    m.sources.resize(static_cast<size_t>(L));
    for (int k = 0; k < L; ++k) m.sources[k] = peers.flag_payload(transport::kFlagStaged, r.slot, k);
    m.queue->reduce(out, m.sources.data(), L, count, type, partial);
  } else {
    m.queue->publish(round_area(peers, r, peers.local_rank()), in, bytes);
    node_reduce_round(m, r, node_signature(0, count, type, op), wait, 0, count, nullptr, out, type, partial);
  }
  if (op == ReduceOp::kAvg) m.queue->divide(out, count, type, world);
  m.pieces_done += 1;
}

namespace {

void allreduce_leader(const OpContext& issue, Hierarchy& h, NodeMemory& m, NetworkStage& net, const void* in, void* out,
                      size_t count, DataType type, ReduceOp op, InterNode inter) {
  // Latency-bound sizes across nodes: one message per node pair instead of one per rail. Every rail would carry
  // a few bytes, and each message costs its receiver a wake-up where ranks share cores (through every rail, more
  // than twice the time of one rank per node). So local rank 0 alone crosses the network:
  //   (1) every local rank stages its input (in its flag line, or its area) and signals; local rank 0 waits for
  //       all and reduces them in local-rank order into `out` (the others read nothing, so they do not wait);
  //   (2) local rank 0 allreduces `out` over its rail with the other nodes' local rank 0;
  //   (3) it broadcasts the result to the node (broadcast_node, which the others wait in).
  // Slot safety: local rank 0 reads round t before it broadcasts the result, and every other rank waits for that
  // broadcast before it stages a later round. (The broadcast is round t+1, or up to a ring entry's size an entry of
  // local rank 0's ring, which takes no round.)
  transport::PeerMemory& peers = *m.peers;
  const int L = peers.local_size(), l = peers.local_rank();
  const size_t bytes = count * dtype_size(type);
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const uint64_t signature = node_signature(0, count, type, op);
  const bool in_line = bytes <= peers.flag_payload_bytes();
  const NodeRound r = node_round(m, 0, in_line ? 0 : bytes);
  auto staged = [&](int k) -> uint8_t* {
    return in_line ? peers.flag_payload(transport::kFlagStaged, r.slot, k) : round_area(peers, r, k);
  };
  if (l != 0) {
    m.queue->publish(staged(l), in, bytes);
    m.queue->signal(peers.flag(transport::kFlagStaged, r.slot, l), r.generation, signature);
  } else {  // its own input is read where it is
    node_sync(m, transport::kFlagStaged, r.slot, r.generation, signature, issue.wait("intra-node reduce"),
              m.flags);
    m.sources.resize(static_cast<size_t>(L));
    for (int k = 0; k < L; ++k) m.sources[k] = k == 0 ? in : staged(k);
    m.queue->reduce(out, m.sources.data(), L, count, type, partial);
  }
  m.pieces_done += 1;
  if (l == 0) {
    net.hand_over(whole_over_rail(h, inter, out, count, type, op, issue.world));
    net.take_back();
  }
  broadcast_node(issue, m, out, out, bytes, 0);
}

// The pipelined schedule of the file's opening comment, piece by piece: phase (1) of a piece (reduce_scatter), its
// phase (2) as a network job, its phase (3) (allgather), and the software pipeline that overlaps them (run).
class PipelinedRun {
 public:
  PipelinedRun(const OpContext& issue, const Hierarchy& h, NodeMemory& m, NetworkStage& net, const void* in, void* out,
               size_t count, DataType type, ReduceOp op, InterNode inter)
      : h_(h),
        m_(m),
        net_(net),
        peers_(*m.peers),
        queue_(*m.queue),
        input_(static_cast<const uint8_t*>(in)),
        output_(static_cast<uint8_t*>(out)),
        count_(count),
        type_(type),
        op_(op),
        partial_(op == ReduceOp::kAvg ? ReduceOp::kSum : op),  // divide once, at the very end
        inter_(inter),
        world_(issue.world),
        elem_(dtype_size(type)),
        L_(peers_.local_size()),
        l_(peers_.local_rank()),
        piece_(std::max<size_t>(1, peers_.area_bytes() / elem_)),
        align_(std::max<size_t>(1, 64 / elem_)),         // shards start on cache lines: vector loads stay aligned
        signature_(node_signature(0, count, type, op)),  // compared at every reduce-scatter wait
        staged_(m.network_staging[0] != nullptr),        // device data: the network works on a host copy
        network_(h.rail.size() > 1),
        staged_wait_(issue.wait("intra-node reduce-scatter")),
        published_wait_(issue.wait("intra-node allgather")),
        direct_(!network_ && queue_.kind() == device::MemoryKind::kHost),
        both_(direct_ && count * elem_ < h.cached_output_bytes &&
              count * elem_ / static_cast<size_t>(L_) >= h.output_share_bytes) {}

  // Software pipeline: piece p crosses the network while the reduce-scatter of piece p+1 and then the allgather of
  // piece p-1 are issued.
  void run() {
    const size_t pieces = (count_ + piece_ - 1) / piece_;
    std::vector<Piece> ready;  // pieces handed to the network stage, oldest first (at most two)
    ready.reserve(2);
    for (size_t index = 0; index <= pieces; ++index) {
      if (index < pieces) {
        ready.push_back(reduce_scatter(index));
        if (network_) net_.hand_over(network_job(ready.back()));
      }
      if (ready.size() > (index < pieces ? 1u : 0u)) {
        if (network_) net_.take_back();
        allgather(ready.front());
        ready.erase(ready.begin());
      }
    }
    m_.pieces_done += pieces;
  }

 private:
  struct Piece {
    size_t index, offset, n;
    NodeRound round;
    Segments shards;
    uint8_t* mine;  // this rank's shard of the piece: in `out`, or (direct) in its area, published as reduced
    size_t mine_count;
  };

  // Phase (1): the piece staged in this rank's area (direct: all but its own shard) and its shard reduced over the
  // node's areas.
  Piece reduce_scatter(size_t index) {
    Piece p{};
    p.index = index;
    p.offset = index * piece_;
    p.n = std::min(piece_, count_ - p.offset);
    p.round = node_round(m_, index, p.n * elem_);
    p.shards = Segments::aligned(p.n, L_, align_);
    const size_t at = p.shards.offset[l_] * elem_;
    p.mine_count = p.shards.count[l_];
    const uint8_t* piece_in = input_ + p.offset * elem_;
    uint8_t* area = round_area(peers_, p.round, l_);
    if (direct_) {  // the shards before this rank's and after it
      const size_t end = at + p.mine_count * elem_;
      if (at > 0) queue_.publish(area, piece_in, at);
      if (end < p.n * elem_) queue_.publish(area + end, piece_in + end, p.n * elem_ - end);
    } else {
      queue_.publish(area, piece_in, p.n * elem_);
    }
    uint8_t* result = output_ + p.offset * elem_ + at;
    p.mine = direct_ ? area + at : result;
    node_reduce_round(m_, p.round, signature_, staged_wait_, p.shards.offset[l_], p.mine_count,
                      direct_ ? piece_in + at : nullptr, p.mine, type_, partial_, both_ ? result : nullptr);
    if (!network_ && op_ == ReduceOp::kAvg) {
      queue_.divide(p.mine, p.mine_count, type_, world_);
      if (both_) queue_.divide(result, p.mine_count, type_, world_);
    }
    if (network_ && staged_) queue_.copy(m_.network_staging[p.round.slot], p.mine, p.mine_count * elem_);
    return p;
  }

  // Phase (2) of a piece, as a job that outlives this call (device memory: it runs on the progress thread later):
  // it captures values, not this run.
  NetworkStage::Job network_job(const Piece& p) const {
    uint8_t* data = staged_ ? m_.network_staging[p.round.slot] : p.mine;
    return [&h = h_, inter = inter_, data, n = p.mine_count, index = p.index, piece = piece_, L = L_, align = align_,
            elem = elem_, type = type_, op = op_, partial = partial_, world = world_](Channel& ch) {
      // Pieces get disjoint step ranges, as wide as the inter-node algorithm may need for the largest shard: the
      // ring 2 N (chunks per shard + 1) steps, the sharded servers 2 (chunks per part).
      const size_t largest = piece / L + align;
      const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes / elem);
      const size_t steps =
          inter == InterNode::kSharded
              ? 2 * ShardedChunks::of(largest, static_cast<int>(h.rail.size()), elem, ch.config()).chunks
              : 2 * h.rail.size() * (largest / chunk + 2);
      const auto stride = static_cast<uint32_t>(steps + 8);
      Channel rail = ch.subgroup(h.rail, h.node, static_cast<uint32_t>(index) * stride);
      inter_node_allreduce(rail, h, inter, data, n, type, partial);
      if (op == ReduceOp::kAvg) reduce::divide(data, n, type, world);
    };
  }

  // Phase (3): this rank's finished shard published, the others' copied out of their areas.
  void allgather(const Piece& p) {
    const size_t at = p.shards.offset[l_] * elem_;
    if (network_ && staged_) queue_.copy(p.mine, m_.network_staging[p.round.slot], p.mine_count * elem_);
    if (!direct_) queue_.publish(round_area(peers_, p.round, l_) + at, p.mine, p.mine_count * elem_);
    node_gather_round(m_, p.round, kFlagPublished, 0, published_wait_, p.shards, output_ + p.offset * elem_, 0, type_);
    // The rank's own shard last, as the node allgather does with a large block: the others' are read first, while
    // they may still be in their reducers' caches.
    if (direct_ && !both_) queue_.copy(output_ + p.offset * elem_ + at, p.mine, p.mine_count * elem_);
  }

  const Hierarchy& h_;
  NodeMemory& m_;
  NetworkStage& net_;
  transport::PeerMemory& peers_;
  device::Queue& queue_;
  const uint8_t* const input_;
  uint8_t* const output_;
  const size_t count_;
  const DataType type_;
  const ReduceOp op_, partial_;
  const InterNode inter_;
  const int world_;
  const size_t elem_;
  const int L_, l_;
  const size_t piece_, align_;
  const uint64_t signature_;
  const bool staged_, network_;
  const device::WaitContext staged_wait_, published_wait_;
  // One node, host memory: a rank stages only the shards the others reduce and reads its own from its input, and
  // reduces its shard in one pass into both its area, published as it is, and its output, so the gather copies
  // only the others' shards. Per rank, 2 ranks: 4 bytes of memory traffic per byte of the piece, where staging
  // everything and publishing a copy of the result took 5.5 (and reducing into the area alone, then gathering the
  // rank's own shard from it, 4.5). That holds while the output can stay in the last-level cache: a message as
  // large as the cache is reduced into the area alone and the rank's own shard copied from there after the
  // others' (`both_` false), which measured faster there whether or not the ranks' cores share that cache
  // (docs/experiments.md, "Measured design decisions"). So is a small share (under h.output_share_bytes per
  // rank): writing it to the output as well, before the signal the other ranks wait for, measured slower at 4
  // ranks than copying it from the area (still in cache at that size) after the gather (docs/experiments.md, "The
  // output copy of a small shard"). Across nodes the shard is reduced into `out` for the network phase; on device
  // memory every copy is a kernel launch, and one copy of the piece costs less than two.
  const bool direct_, both_;
};

}  // namespace

void allreduce_hier(const OpContext& issue, Hierarchy& h, NodeMemory& m, NetworkStage& net, const void* in, void* out,
                    size_t count, DataType type, ReduceOp op, InterNode inter) {
  const size_t bytes = count * dtype_size(type);
  switch (hier_variant(h, m, bytes)) {
    case HierVariant::kNetworkOnly:  // host memory only
      if (m.network_staging[0] != nullptr) {
        throw InternalError(issue.limits.what + ": device memory needs peer memory for the hierarchical allreduce");
      }
      m.queue->copy(out, in, bytes);
      net.hand_over(whole_over_rail(h, inter, out, count, type, op, issue.world));
      net.take_back();
      return;
    case HierVariant::kOneShot:
      return allreduce_one_shot(m, issue.wait(kOneShotPhase), in, out, count, type, op, issue.world);
    case HierVariant::kLeader: return allreduce_leader(issue, h, m, net, in, out, count, type, op, inter);
    case HierVariant::kPipelined: return PipelinedRun(issue, h, m, net, in, out, count, type, op, inter).run();
  }
}

}  // namespace hiercoll::algo
