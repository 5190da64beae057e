// Sharded reduction servers (the inter-node scheme of SageMaker's data-parallel library, "Herring", SC20): the
// buffer is cut into n parts and rank j serves part j. Every rank sends part j to rank j, all n-1 sends at once;
// rank j reduces the n-1 parts it receives into its own as they arrive and sends the result back to every rank,
// again all at once. Two network steps whatever n is (the ring takes 2(n-1)), and each rank sends and receives
// 2(n-1)/n of the buffer, as in the ring. Pipelined in chunks: chunk c of every part crosses the network while
// chunk c-1 is being reduced and returned. Every rank ends with the same bits: each part is reduced once, by its
// server, in rank order.
#include <algorithm>
#include <vector>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

void allreduce_sharded(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  const size_t elem = dtype_size(type);
  const int n = ch.size(), me = ch.rank();
  if (n == 1 || count == 0) {
    copy_bytes(out, in, count * elem);
    return;
  }
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const Segments parts = Segments::aligned(count, n, std::max<size_t>(1, 64 / elem));
  const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes / elem);
  size_t chunks = 0;  // per part, of the largest part
  for (int p = 0; p < n; ++p) chunks = std::max(chunks, (parts.count[p] + chunk - 1) / chunk);
  const size_t slots = std::min<size_t>(static_cast<size_t>(std::max(1, ch.config().slots)), chunks);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const bool in_place = src == dst;

  // Chunk c of part p: [begin, begin + len) elements of the whole buffer (len 0 past the part's end: both sides
  // skip that message alike).
  auto range = [&](int p, size_t c) {
    const size_t begin = std::min(parts.count[p], c * chunk);
    return std::make_pair(parts.offset[p] + begin, std::min(parts.count[p], begin + chunk) - begin);
  };
  // Phase 1 lands in scratch: slot (c % slots) holds chunk c from each of the n-1 other ranks.
  auto* landing = static_cast<uint8_t*>(ch.scratch().get(slots * static_cast<size_t>(n) * chunk * elem, 0));
  auto landing_at = [&](int from, size_t c) { return landing + ((c % slots) * n + from) * chunk * elem; };
  auto step_of = [](size_t c, int phase) { return static_cast<uint32_t>(2 * c + phase); };

  // Requests by chunk and peer; a null one is a message of no elements, never posted.
  std::vector<std::vector<RequestPtr>> gather(chunks, std::vector<RequestPtr>(n)),
      scatter(chunks, std::vector<RequestPtr>(n)), returned(chunks, std::vector<RequestPtr>(n));
  std::vector<RequestPtr> results;  // this rank's reduced chunks going back out
  auto post_phase1 = [&](size_t c) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const size_t mine = range(me, c).second;
      if (mine > 0) gather[c][p] = ch.recv(p, step_of(c, 0), landing_at(p, c), mine * elem);
      const auto [begin, len] = range(p, c);
      if (len > 0) scatter[c][p] = ch.send(p, step_of(c, 0), src + begin * elem, len * elem);
    }
  };

  for (size_t c = 0; c < slots; ++c) post_phase1(c);
  for (size_t c = 0; c < chunks; ++c) {
    const auto [begin, len] = range(me, c);
    if (len > 0) {
      // Serve chunk c of this rank's part: own data first, then every other rank's in rank order.
      uint8_t* served = dst + begin * elem;
      copy_bytes(served, src + begin * elem, len * elem);
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        ch.wait(gather[c][p]);
        reduce::reduce(served, served, landing_at(p, c), len, type, partial);
        gather[c][p].reset();
      }
      if (op == ReduceOp::kAvg) reduce::divide(served, len, type, n);
      for (int p = 0; p < n; ++p) {
        if (p != me) results.push_back(ch.send(p, step_of(c, 1), served, len * elem));
      }
    }
    // Every other part's chunk c comes back from its server into `out`; in place, only once this rank's own
    // send of that memory has completed (until then the transport may still read it).
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const auto [at, count_back] = range(p, c);
      if (count_back == 0) continue;
      if (in_place) ch.wait(scatter[c][p]);
      returned[c][p] = ch.recv(p, step_of(c, 1), dst + at * elem, count_back * elem);
    }
    if (c + slots < chunks) post_phase1(c + slots);  // chunk c's landing slot is free again
  }
  auto wait_posted = [&](std::vector<RequestPtr>& requests) {
    for (auto& request : requests) {
      if (request) ch.wait(request);
    }
  };
  for (auto& by_peer : returned) wait_posted(by_peer);
  for (auto& by_peer : scatter) wait_posted(by_peer);
  wait_posted(results);
}

}  // namespace hiercoll::algo
