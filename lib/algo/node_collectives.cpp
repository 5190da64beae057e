// Reduce-scatter and allgather among the ranks of one node, through its peer memory (shared memory for host
// buffers, CUDA IPC for device buffers): every rank reads the others' data directly instead of passing it
// round a ring. Used when the whole communicator is one node.
//
// Both go in rounds. A round stages this rank's part in its area and signals the slot's staged flag; once
// every local rank has, each reads what it needs from all areas. A rank overwrites slot s in round t+3 only
// after the wait of round t+2, which every rank signals only after its reads of round t+1 (and so of t):
// the same rotation and generations as the hierarchical allreduce, sharing NodeMemory::pieces_done with it.
#include <algorithm>

#include "algo/algorithms.hpp"
#include "algo/hierarchy.hpp"

namespace hiercoll::algo {
namespace {

using transport::kFlagStaged;

// node_signature kinds (the hierarchical allreduce is 0).
enum NodeOp : uint64_t { kNodeReduceScatter = 1, kNodeAllgather = 2 };

// Elements per round and rank: `share` of the area, cut at whole cache lines so vector loads stay aligned.
size_t round_elements(const transport::PeerMemory& peers, size_t share, size_t elem) {
  const size_t line = std::max<size_t>(1, 64 / elem);
  return std::max(line, peers.area_bytes() / share / elem / line * line);
}

// The rounds of one operation: slot and generation of round t, continuing NodeMemory::pieces_done.
class NodeRounds {
 public:
  NodeRounds(const Issue& issue, NodeMemory& m, uint64_t signature, const char* phase)
      : m_(m), signature_(signature), wait_(issue.wait(phase)) {}

  /// Slot of round `t`; stage this rank's part there before calling sync(t).
  int slot(size_t t) const { return static_cast<int>((m_.pieces_done + t) % kHierBufferSets); }
  /// Publishes this rank's staged part of round `t` and waits for every local rank's.
  void sync(size_t t) { node_sync(m_, kFlagStaged, slot(t), m_.pieces_done + t + 1, signature_, wait_, m_.flags); }
  void finish(size_t rounds) { m_.pieces_done += rounds; }

 private:
  NodeMemory& m_;
  uint64_t signature_;
  device::WaitContext wait_;
};

}  // namespace

void reduce_scatter_node(const Issue& issue, NodeMemory& m, const void* in, void* out, size_t recv_count, DataType type,
                         ReduceOp op) {
  transport::PeerMemory& peers = *m.peers;
  device::Queue& queue = *m.queue;
  const int L = peers.local_size(), me = peers.local_rank();
  const size_t elem = dtype_size(type), q = round_elements(peers, static_cast<size_t>(L), elem);
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  NodeRounds rounds(issue, m, node_signature(kNodeReduceScatter, recv_count, type, op), "intra-node reduce-scatter");
  std::vector<const void*>& sources = m.sources;
  sources.resize(static_cast<size_t>(L));
  const size_t count = (recv_count + q - 1) / q;
  for (size_t t = 0; t < count; ++t) {
    const size_t offset = t * q, n = std::min(q, recv_count - offset);
    uint8_t* area = peers.area(rounds.slot(t), me);
    // Stage the round's slice of every block: block j goes to j*q of this rank's area, for rank j to reduce.
    for (int j = 0; j < L; ++j) {
      queue.copy(area + static_cast<size_t>(j) * q * elem, input + (j * recv_count + offset) * elem, n * elem);
    }
    rounds.sync(t);
    for (int k = 0; k < L; ++k) sources[k] = peers.area(rounds.slot(t), k) + static_cast<size_t>(me) * q * elem;
    queue.reduce(output + offset * elem, sources.data(), L, n, type, partial);
    if (op == ReduceOp::kAvg) queue.divide(output + offset * elem, n, type, L);
  }
  rounds.finish(count);
}

void allgather_node(const Issue& issue, NodeMemory& m, const void* in, void* out, size_t send_count, DataType type) {
  transport::PeerMemory& peers = *m.peers;
  device::Queue& queue = *m.queue;
  const int L = peers.local_size(), me = peers.local_rank();
  const size_t elem = dtype_size(type), q = round_elements(peers, 1, elem);
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  NodeRounds rounds(issue, m, node_signature(kNodeAllgather, send_count, type, ReduceOp::kSum), "intra-node allgather");
  const size_t count = (send_count + q - 1) / q;
  for (size_t t = 0; t < count; ++t) {
    const size_t offset = t * q, n = std::min(q, send_count - offset);
    queue.copy(peers.area(rounds.slot(t), me), input + offset * elem, n * elem);
    rounds.sync(t);
    for (int k = 0; k < L; ++k) {
      uint8_t* to = output + (k * send_count + offset) * elem;
      // Our own block straight from the input (nothing to copy when in place).
      queue.copy(to, k == me ? input + offset * elem : peers.area(rounds.slot(t), k), n * elem);
    }
  }
  rounds.finish(count);
}

}  // namespace hiercoll::algo
