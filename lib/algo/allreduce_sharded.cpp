// Sharded reduction servers (the inter-node scheme of SageMaker's data-parallel library, "Herring", SC20): the
// buffer is cut into n parts and rank j serves part j. Every rank sends part j to rank j, all n-1 sends at once;
// rank j reduces the n-1 parts it receives into its own as they arrive and sends the result back to every rank,
// again all at once. Two network steps whatever n is (the ring takes 2(n-1)), and each rank sends and receives
// 2(n-1)/n of the buffer, as in the ring. Pipelined in chunks: chunk c of every part crosses the network while
// chunk c-1 is being reduced and returned, with up to `slots` chunks' receives posted ahead. Every rank ends with the
// same bits: each part is reduced once, by its server, in rank order.
#include <algorithm>
#include <utility>
#include <vector>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

ShardedChunks ShardedChunks::of(size_t count, int n, size_t elem, const AlgoConfig& config) {
  ShardedChunks plan;
  plan.parts = Segments::aligned(count, n, std::max<size_t>(1, 64 / elem));
  // The first chunk's scatter and the last one's return overlap nothing, so a part cut into k chunks takes about
  // (k + 1) / k of the link time: at least kMinChunks per part, down to kFloorBytes. And at most kMaxBytes per
  // message: a server's chunk is done only when the slowest of its n-1 incoming flows has delivered it, and flows
  // sharing a link progress unevenly over large messages, so larger ones lost to smaller ones on the emulated
  // cluster (`git log -S kFloorBytes` has the figures).
  constexpr size_t kMinChunks = 8, kFloorBytes = 32 << 10, kMaxBytes = 128 << 10;
  size_t largest = 0;
  for (int p = 0; p < n; ++p) largest = std::max(largest, plan.parts.count[p]);
  const size_t ceiling = std::max<size_t>(1, std::min(config.chunk_bytes, kMaxBytes) / elem);
  plan.chunk = std::min(ceiling, std::max(kFloorBytes / elem, (largest + kMinChunks - 1) / kMinChunks));
  plan.chunks = (largest + plan.chunk - 1) / plan.chunk;
  return plan;
}

namespace {

// One allreduce through the servers, chunk by chunk: post(c) the receives and sends of chunk c, serve(c) this
// rank's part of it, settle(c) an in-place run's returned results, finish() the last waits.
class ShardedRun {
 public:
  ShardedRun(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op)
      : ch_(ch),
        n_(ch.size()),
        me_(ch.rank()),
        type_(type),
        op_(op),
        partial_(op == ReduceOp::kAvg ? ReduceOp::kSum : op),
        elem_(dtype_size(type)),
        plan_(ShardedChunks::of(count, n_, elem_, ch.config())),
        slots_(std::min<size_t>(static_cast<size_t>(std::max(1, ch.config().slots)), plan_.chunks)),
        src_(static_cast<const uint8_t*>(in)),
        dst_(static_cast<uint8_t*>(out)),
        in_place_(src_ == dst_),
        // Slot (c % slots) of scratch buffer 0 holds chunk c from each of the n-1 other ranks (phase 1). In place,
        // the servers' results for chunk c land in buffer 1 and are copied out once this rank's own sends of that
        // memory have completed (until then the transport may still read it); out of place they land in `out`.
        slot_bytes_(static_cast<size_t>(n_) * plan_.chunk * elem_),
        landing_(static_cast<uint8_t*>(ch.scratch().get(slots_ * slot_bytes_, 0))),
        returning_(in_place_ ? static_cast<uint8_t*>(ch.scratch().get(slots_ * slot_bytes_, 1)) : nullptr),
        gather_(plan_.chunks, std::vector<RequestPtr>(n_)),
        scatter_(plan_.chunks, std::vector<RequestPtr>(n_)),
        returned_(plan_.chunks, std::vector<RequestPtr>(n_)) {}

  void run() {
    const size_t chunks = plan_.chunks;
    for (size_t c = 0; c < slots_; ++c) post(c);
    for (size_t c = 0; c < chunks; ++c) {
      serve(c);
      if (in_place_) settle(c);
      if (c + slots_ < chunks) post(c + slots_);  // chunk c's slots are free again
    }
    for (auto& by_peer : returned_) wait_posted(by_peer);
    for (auto& by_peer : scatter_) wait_posted(by_peer);
    wait_posted(results_);
  }

 private:
  // Chunk c of part p: [begin, begin + len) elements of the whole buffer (len 0 past the part's end: both sides
  // skip that message alike).
  std::pair<size_t, size_t> range(int p, size_t c) const {
    const Segments& parts = plan_.parts;
    const size_t begin = std::min(parts.count[p], c * plan_.chunk);
    return {parts.offset[p] + begin, std::min(parts.count[p], begin + plan_.chunk) - begin};
  }
  uint8_t* slot_at(uint8_t* base, int from, size_t c) const {
    return base + (c % slots_) * slot_bytes_ + static_cast<size_t>(from) * plan_.chunk * elem_;
  }
  static uint32_t step_of(size_t c, int phase) { return static_cast<uint32_t>(2 * c + phase); }

  // Chunk c's receives of both phases are posted before its sends, so every server's result finds its receive
  // posted (on providers with a rendezvous protocol an unexpected large message waits for one). A null request is
  // a message of no elements, never posted.
  void post(size_t c) {
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      const size_t mine = range(me_, c).second;
      if (mine > 0) gather_[c][p] = ch_.recv(p, step_of(c, 0), slot_at(landing_, p, c), mine * elem_);
      const auto [begin, len] = range(p, c);
      if (len > 0) {
        uint8_t* to = in_place_ ? slot_at(returning_, p, c) : dst_ + begin * elem_;
        returned_[c][p] = ch_.recv(p, step_of(c, 1), to, len * elem_);
      }
    }
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      const auto [begin, len] = range(p, c);
      if (len > 0) scatter_[c][p] = ch_.send(p, step_of(c, 0), src_ + begin * elem_, len * elem_);
    }
  }

  // Serves chunk c of this rank's part: own data first, then every other rank's in rank order; the result goes back
  // to every rank.
  void serve(size_t c) {
    const auto [begin, len] = range(me_, c);
    if (len == 0) return;
    uint8_t* served = dst_ + begin * elem_;
    copy_bytes(served, src_ + begin * elem_, len * elem_);
    for (int p = 0; p < n_; ++p) {
      if (p == me_) continue;
      ch_.wait(gather_[c][p]);
      reduce::reduce(served, served, slot_at(landing_, p, c), len, type_, partial_);
      gather_[c][p].reset();
    }
    if (op_ == ReduceOp::kAvg) reduce::divide(served, len, type_, n_);
    for (int p = 0; p < n_; ++p) {
      if (p != me_) results_.push_back(ch_.send(p, step_of(c, 1), served, len * elem_));
    }
  }

  // In place: frees chunk c's return slot, its results copied where this rank's sends of chunk c read from.
  void settle(size_t c) {
    for (int p = 0; p < n_; ++p) {
      if (!returned_[c][p]) continue;
      const auto [at, count_back] = range(p, c);
      ch_.wait(scatter_[c][p]);
      ch_.wait(returned_[c][p]);
      copy_bytes(dst_ + at * elem_, slot_at(returning_, p, c), count_back * elem_);
      returned_[c][p].reset();
      scatter_[c][p].reset();
    }
  }

  void wait_posted(std::vector<RequestPtr>& requests) {
    for (auto& request : requests) {
      if (request) ch_.wait(request);
    }
  }

  Channel& ch_;
  const int n_, me_;
  const DataType type_;
  const ReduceOp op_, partial_;
  const size_t elem_;
  const ShardedChunks plan_;
  const size_t slots_;
  const uint8_t* const src_;
  uint8_t* const dst_;
  const bool in_place_;
  const size_t slot_bytes_;
  uint8_t* const landing_;
  uint8_t* const returning_;
  // Requests by chunk and peer.
  std::vector<std::vector<RequestPtr>> gather_, scatter_, returned_;
  std::vector<RequestPtr> results_;  // this rank's reduced chunks going back out
};

}  // namespace

void allreduce_sharded(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  if (ch.size() == 1 || count == 0) {
    copy_bytes(out, in, count * dtype_size(type));
    return;
  }
  ShardedRun(ch, in, out, count, type, op).run();
}

}  // namespace hiercoll::algo
