// Reduce-scatter, allgather and broadcast among the ranks of one node, through its peer memory (shared memory for
// host buffers, CUDA IPC for device buffers; broadcast on host buffers only): every rank reads the others' data
// directly instead of passing it round a ring. Used when the whole communicator is one node; their rounds
// (node_reduce_round, node_gather_round) are also the intra-node phases of the hierarchical allreduce.
//
// They go in rounds. A round stages this rank's part in its area of the round's slot; once every local rank has
// signalled its part, each reads what it needs from all areas. Slots and generations follow node_round(). A
// broadcast of up to a ring entry (4 KB in shared memory) goes through the root's ring instead (broadcast_ring),
// which takes no round.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.hpp"
#include "algo/hierarchy.hpp"

namespace hiercoll::algo {

void node_reduce_round(NodeMemory& m, NodeRound r, uint64_t signature, const device::WaitContext& wait, size_t at,
                       size_t n, const void* own, void* out, DataType type, ReduceOp op, void* mine) {
  transport::PeerMemory& peers = *m.peers;
  const int L = peers.local_size(), me = peers.local_rank();
  const size_t at_bytes = at * dtype_size(type);
  node_sync(m, transport::kFlagStaged, r.slot, r.generation, signature, wait, m.flags);
  m.sources.resize(static_cast<size_t>(L));
  for (int k = 0; k < L; ++k) m.sources[k] = k == me && own != nullptr ? own : round_area(peers, r, k) + at_bytes;
  if (n == 0) return;
  if (mine != nullptr) {
    m.queue->reduce_to_both(out, mine, m.sources.data(), L, n, type, op);
  } else {
    m.queue->reduce(out, m.sources.data(), L, n, type, op);
  }
}

namespace {

// The largest own block the node allgather copies before waiting for the others' (docs/experiments.md, "The one-node
// allgather's own block").
constexpr size_t kOwnBlockFirstBytes = 32 << 10;

// node_signature kinds (the hierarchical allreduce is 0). The direct ones differ from the staged: ranks whose
// HIERCOLL_CMA_BYTES differ fail at the first wait instead of reading addresses as data.
enum NodeOp : uint64_t {
  kNodeReduceScatter = 1,
  kNodeAllgather = 2,
  kNodeBroadcast = 3,
  kNodeAllgatherDirect = 4,
  kNodeBroadcastDirect = 5,
  kNodeBarrier = 6
};

// Whether an allgather or a broadcast moving `bytes` per rank reads the peers' buffers directly (direct_round): one
// copy through the kernel instead of two through the areas, at the price of a system call that pins the peer's
// pages. Off unless HIERCOLL_CMA_BYTES asks for it: on the host it was measured on, the staged rounds were as fast or
// faster at every size whether or not the ranks' cores shared a cache (docs/tuning.md).
bool direct_reads(const NodeMemory& m, size_t bytes) {
  return m.direct_bytes != 0 && bytes >= m.direct_bytes && m.queue->kind() == device::MemoryKind::kHost &&
         m.peers->direct_token() != 0;
}

// One round of single copies: every rank publishes where its buffer `mine` is (in its staged flag line), and once
// all have, `move(k, token, address)` takes what it needs straight from rank k's buffer, or puts it there
// (PeerMemory::direct_read, direct_write); then every rank says in its published flag line that it has finished,
// and whether its moves all worked, and waits for the others, since a rank's buffer may change once its call
// returns. Data that only moves is copied once, not into an area and out again (2 ranks, 4 MB allgather: 6 MB
// copied per rank staged, 4 MB so; the kernel's copy pins the peer's pages as it goes, so it pays only from tens of
// KB: docs/tuning.md). Returns false on every local rank alike if any rank's move was refused: direct moves are
// then off for good, and the caller stages the operation instead.
template <class Move>
bool direct_round(NodeMemory& m, uint64_t signature, const device::WaitContext& wait, const void* mine, Move move) {
  transport::PeerMemory& peers = *m.peers;
  const int L = peers.local_size(), me = peers.local_rank();
  const NodeRound r = node_round(m, 0);
  const uint64_t where[2] = {peers.direct_token(), reinterpret_cast<uintptr_t>(mine)};
  node_flag_round(m, r, signature, wait, where, sizeof(where));
  bool mine_ok = true;
  for (int k = 0; k < L; ++k) {
    if (k == me) continue;
    uint64_t theirs[2];
    std::memcpy(theirs, peers.flag_payload(transport::kFlagStaged, r.slot, k), sizeof(theirs));
    mine_ok = move(k, theirs[0], reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(theirs[1]))) && mine_ok;
  }
  const uint64_t verdict = mine_ok ? 1 : 0;
  std::memcpy(peers.flag_payload(transport::kFlagPublished, r.slot, me), &verdict, sizeof(verdict));
  node_sync(m, transport::kFlagPublished, r.slot, r.generation, signature, wait, m.flags);
  bool all_ok = true;
  for (int k = 0; k < L; ++k) {
    uint64_t theirs = 0;
    std::memcpy(&theirs, peers.flag_payload(transport::kFlagPublished, r.slot, k), sizeof(theirs));
    all_ok = all_ok && theirs == 1;
  }
  m.pieces_done += 1;
  if (!all_ok) m.direct_bytes = 0;
  return all_ok;
}

// Elements per round and rank: `share` of the area, cut at whole cache lines so vector loads stay aligned.
size_t round_elements(const transport::PeerMemory& peers, size_t share, size_t elem) {
  const size_t line = std::max<size_t>(1, 64 / elem);
  return std::max(line, peers.area_bytes() / share / elem / line * line);
}

}  // namespace

void reduce_scatter_node(const OpContext& issue, NodeMemory& m, const void* in, void* out, size_t recv_count,
                         DataType type, ReduceOp op) {
  transport::PeerMemory& peers = *m.peers;
  device::Queue& queue = *m.queue;
  const int L = peers.local_size(), me = peers.local_rank();
  const size_t elem = dtype_size(type), q = round_elements(peers, static_cast<size_t>(L), elem);
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  const uint64_t signature = node_signature(kNodeReduceScatter, recv_count, type, op);
  const device::WaitContext wait = issue.wait("intra-node reduce-scatter");
  if (recv_count > 0 && static_cast<size_t>(L) * recv_count * elem <= peers.flag_payload_bytes()) {
    // The whole input rides in this rank's flag line (allreduce_one_shot): one transfer per peer, no area.
    const NodeRound r = node_round(m, 0);
    const size_t block = recv_count * elem;
    node_flag_round(m, r, signature, wait, input, static_cast<size_t>(L) * block);
    m.sources.resize(static_cast<size_t>(L));
    for (int k = 0; k < L; ++k) {
      m.sources[k] = peers.flag_payload(transport::kFlagStaged, r.slot, k) + static_cast<size_t>(me) * block;
    }
    queue.reduce(output, m.sources.data(), L, recv_count, type, partial);
    if (op == ReduceOp::kAvg) queue.divide(output, recv_count, type, L);
    m.pieces_done += 1;
    return;
  }
  const size_t rounds = (recv_count + q - 1) / q;
  // On host memory a rank reads its own block's slice from its input instead of staging it: (L-1)/L of the input
  // staged, not all of it (2 ranks, 1 MB: 3.5 -> 2.5 bytes of memory traffic per output byte, as allreduce_hier's
  // direct mode). A device queue stages it too: there every copy is a kernel launch and one reduce reads one kind of
  // memory. In place (`out` is this rank's block of `in`) the reduce would overwrite that source before reading it.
  const bool in_place = output == input + static_cast<size_t>(me) * recv_count * elem;
  const bool direct = queue.kind() == device::MemoryKind::kHost && !in_place;
  for (size_t t = 0; t < rounds; ++t) {
    const NodeRound r = node_round(m, t);
    const size_t offset = t * q, n = std::min(q, recv_count - offset);
    uint8_t* area = peers.area(r.slot, me);
    const uint8_t* own = input + (static_cast<size_t>(me) * recv_count + offset) * elem;
    // Stage the round's slice of every block: block j goes to j*q of this rank's area, for rank j to reduce.
    for (int j = 0; j < L; ++j) {
      if (direct && j == me) continue;
      queue.publish(area + static_cast<size_t>(j) * q * elem, input + (j * recv_count + offset) * elem, n * elem);
    }
    node_reduce_round(m, r, signature, wait, static_cast<size_t>(me) * q, n, direct ? own : nullptr,
                      output + offset * elem, type, partial);
    if (op == ReduceOp::kAvg) queue.divide(output + offset * elem, n, type, L);
  }
  m.pieces_done += rounds;
}

void allgather_node(const OpContext& issue, NodeMemory& m, const void* in, void* out, size_t send_count,
                    DataType type) {
  transport::PeerMemory& peers = *m.peers;
  device::Queue& queue = *m.queue;
  const int L = peers.local_size(), me = peers.local_rank();
  const size_t elem = dtype_size(type), q = round_elements(peers, 1, elem);
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  // Every rank's part of a round sits at the start of its area and goes to its block of the output.
  Segments parts;
  parts.offset.assign(static_cast<size_t>(L), 0);
  const uint64_t signature = node_signature(kNodeAllgather, send_count, type, ReduceOp::kSum);
  const device::WaitContext wait = issue.wait("intra-node allgather");
  const size_t block = send_count * elem;
  if (send_count > 0 && block <= peers.flag_payload_bytes()) {  // in the flag lines, as in reduce_scatter_node
    const NodeRound r = node_round(m, 0);
    node_flag_round(m, r, signature, wait, input, block);
    for (int k = 0; k < L; ++k) {
      const uint8_t* from = k == me ? input : peers.flag_payload(transport::kFlagStaged, r.slot, k);
      queue.copy(output + static_cast<size_t>(k) * block, from, block);
    }
    m.pieces_done += 1;
    return;
  }
  if (direct_reads(m, block)) {
    const uint64_t direct = node_signature(kNodeAllgatherDirect, send_count, type, ReduceOp::kSum);
    auto read = [&](int k, uint64_t token, const uint8_t* theirs) {
      return peers.direct_read(token, output + static_cast<size_t>(k) * block, theirs, block);
    };
    if (direct_round(m, direct, wait, input, read)) {
      queue.copy(output + static_cast<size_t>(me) * block, input, block);
      return;
    }
  }
  const size_t rounds = (send_count + q - 1) / q;
  for (size_t t = 0; t < rounds; ++t) {
    const NodeRound r = node_round(m, t);
    const size_t offset = t * q, n = std::min(q, send_count - offset);
    queue.publish(peers.area(r.slot, me), input + offset * elem, n * elem);
    parts.count.assign(static_cast<size_t>(L), n);
    // Our own block straight from the input (nothing to copy when in place). A small one is copied while the others
    // stage theirs, which hides the wait for their flags; a large one after the others' blocks, which are then read
    // while they are still in their stagers' caches (docs/experiments.md, "The one-node allgather's own block").
    uint8_t* own = output + (static_cast<size_t>(me) * send_count + offset) * elem;
    const bool own_first = n * elem <= kOwnBlockFirstBytes;
    node_gather_round(m, r, transport::kFlagStaged, signature, wait, parts, output + offset * elem, send_count, type,
                      [&] {
                        if (own_first) queue.copy(own, input + offset * elem, n * elem);
                      });
    if (!own_first) queue.copy(own, input + offset * elem, n * elem);
  }
  m.pieces_done += rounds;
}

void barrier_node(const OpContext& issue, NodeMemory& m) {
  // A flag round without payload: every rank's flag of this round is raised only once that rank has arrived.
  const NodeRound r = node_round(m, 0);
  const uint8_t nothing = 0;
  node_flag_round(m, r, node_signature(kNodeBarrier, 0, DataType::kUInt8, ReduceOp::kSum), issue.wait("node barrier"),
                  &nothing, 0);
  m.pieces_done += 1;
}

namespace {

// A small broadcast through the root's ring (PeerMemory::ring_line, and ring_data beyond the line's payload): an
// eager send, as MPI's shared-memory transports make one. Broadcast b (counted by every rank) goes in entry b of
// the root's ring, with generation b; the others wait for it, copy it out and count it read (ring_read). The root
// waits for no one unless it would overwrite an entry someone has not read yet, the one of broadcast b - K or
// earlier, so it may run up to K broadcasts ahead of the slowest rank. In the rounds (below) it runs at most one
// ahead, and every call moves the root's flag line to the others and theirs back, which costs most where ranks
// outnumber cores and every call needs every rank to have run. It touches no slot: the rounds' rotation goes on as
// if it had not happened.
void broadcast_ring(NodeMemory& m, const device::WaitContext& wait, const void* in, void* out, size_t bytes, int root,
                    uint64_t signature) {
  transport::PeerMemory& peers = *m.peers;
  device::Queue& queue = *m.queue;
  const int L = peers.local_size(), me = peers.local_rank();
  const uint64_t b = ++m.ring_broadcasts, lines = static_cast<uint64_t>(peers.ring_lines());
  uint64_t* entry = peers.ring_line(root, static_cast<int>(b % lines));
  // A few bytes ride in the entry's own line (the wait that sees it has them); more in its data block.
  uint8_t* payload = bytes <= peers.flag_payload_bytes()
                         ? reinterpret_cast<uint8_t*>(entry) + transport::PeerMemory::kFlagPayloadOffset
                         : peers.ring_data(root, static_cast<int>(b % lines));
  m.flags.resize(static_cast<size_t>(L));
  if (me == root) {
    if (b > lines && m.ring_all_read < b - lines) {  // the entry held broadcast b - K or earlier: read by all?
      // A root faster than its readers fills the ring; it then waits for half of it to be free, not one entry, so
      // it waits once every K/2 calls instead of at every one, each time for a flag that has just moved.
      for (int k = 0; k < L; ++k) m.flags[k] = peers.ring_read(k);
      queue.wait(m.flags.data(), L, b - lines / 2, 0, wait);
      uint64_t fewest = b;
      for (int k = 0; k < L; ++k) fewest = std::min(fewest, device::flag_word(m.flags[k], 0).load());
      m.ring_all_read = fewest;
    }
    queue.publish(payload, in, bytes);
    queue.signal(entry, b, signature);
  } else {
    // The wait names a laggard by its index: the root's entry at index `root`; before it a flag of this rank's
    // own, already at the generation and signature.
    alignas(64) uint64_t here[8] = {b, signature, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k <= root; ++k) m.flags[k] = k == root ? entry : here;
    queue.wait(m.flags.data(), root + 1, b, signature, wait);
    queue.copy(out, payload, bytes);
  }
  queue.signal(peers.ring_read(me), b, 0);  // after the copy: the root may overwrite the entry from now on
}

}  // namespace

void broadcast_node(const OpContext& issue, NodeMemory& m, const void* in, void* out, size_t bytes, int root) {
  transport::PeerMemory& peers = *m.peers;
  device::Queue& queue = *m.queue;
  const int L = peers.local_size(), me = peers.local_rank();
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  if (me == root) queue.copy(out, in, bytes);
  if (L == 1 || bytes == 0) return;
  // The root too: a rank that names another rank the root fails at that rank's flag. (Ranks that each name
  // themselves all finish, since a root waits for no one's data: docs/reliability.md.)
  const uint64_t signature =
      node_signature(kNodeBroadcast, bytes, DataType::kUInt8, ReduceOp::kSum) ^ (static_cast<uint64_t>(root) << 58);
  const device::WaitContext wait = issue.wait("intra-node broadcast");
  // Not a lock-step round: only the root's data matters, so the root does not wait for the others to arrive, and
  // returns once its data is staged, as an MPI root does once its eager send is posted. What it must wait for is
  // the slot: round g overwrites what round g-3 left there,
  // and a rank that has signalled round g-1 is done reading rounds up to g-3, whichever schedule they belonged to
  // (allreduce_hier's allgather of a piece runs after the reduce-scatter of the next one signals). So before
  // staging round g the root waits for every flag of round g-1 (any signature: that round may have been another
  // operation's); the others signal round g, then wait for the root's, checking its signature.
  // Up to a ring entry's size, where the peer memory has rings, a broadcast goes through the root's ring instead:
  // its root runs ahead rather than in lock step with the others through the rounds below, where every call needs
  // every rank to have run (faster at every size up to an entry, most where ranks outnumber cores: commit
  // history, `git log -S broadcast_ring`). Without rings, a few bytes ride in the root's flag line of the round (as
  // in allreduce_one_shot).
  const bool tiny = bytes <= peers.flag_payload_bytes();
  if (peers.ring_lines() > 0 && bytes <= std::max(peers.flag_payload_bytes(), peers.ring_entry_bytes())) {
    return broadcast_ring(m, wait, in, out, bytes, root, signature);
  }
  if (direct_reads(m, bytes)) {
    // Single copies, and every core moving data: each other rank reads the root's buffer into its own but for the
    // last `pushed` bytes, which the root writes into every other rank's buffer meanwhile. So each of the L ranks
    // copies (L-1)/L of the data, not the others all of it while the root waits, as MPICH's and Intel MPI's ranks
    // both copy. The root publishes its input, the others their output; the root's share is a whole number of
    // pages.
    const uint64_t direct = node_signature(kNodeBroadcastDirect, bytes, DataType::kUInt8, ReduceOp::kSum) ^
                            (static_cast<uint64_t>(root) << 58);
    constexpr size_t kPage = 4096;
    const size_t pushed = bytes / static_cast<size_t>(L) / kPage * kPage, pulled = bytes - pushed;
    auto move = [&](int k, uint64_t token, const uint8_t* theirs) {
      if (me == root) return pushed == 0 || peers.direct_write(token, const_cast<uint8_t*>(theirs) + pulled,
                                                               input + pulled, pushed);
      return k != root || peers.direct_read(token, output, theirs, pulled);
    };
    if (direct_round(m, direct, wait, me == root ? in : out, move)) return;
  }
  const size_t q = tiny ? bytes : peers.area_bytes();
  const size_t rounds = (bytes + q - 1) / q;
  m.flags.resize(static_cast<size_t>(L));
  for (size_t t = 0; t < rounds; ++t) {
    const NodeRound r = node_round(m, t);
    const size_t offset = t * q, n = std::min(q, bytes - offset);
    uint8_t* staged = tiny ? peers.flag_payload(transport::kFlagStaged, r.slot, root) : peers.area(r.slot, root);
    uint64_t* root_flag = peers.flag(transport::kFlagStaged, r.slot, root);
    if (me == root) {
      const int previous = (r.slot + kHierBufferSets - 1) % kHierBufferSets;
      for (int k = 0; k < L; ++k) m.flags[k] = peers.flag(transport::kFlagStaged, previous, k);
      queue.wait(m.flags.data(), L, r.generation - 1, 0, wait);
      queue.publish(staged, input + offset, n);
      queue.signal(root_flag, r.generation, signature);
    } else {
      uint64_t* mine = peers.flag(transport::kFlagStaged, r.slot, me);
      queue.signal(mine, r.generation, signature);
      // A wait names a laggard by its index: the root's flag at index `root`, this rank's own (just signalled,
      // same signature) before it.
      for (int k = 0; k <= root; ++k) m.flags[k] = k == root ? root_flag : mine;
      queue.wait(m.flags.data(), root + 1, r.generation, signature, wait);
      queue.copy(output + offset, staged, n);
    }
  }
  m.pieces_done += rounds;
}

}  // namespace hiercoll::algo
