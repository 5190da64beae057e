// The link probe (select.hpp): two ranks on different nodes measure the fabric between them once, at start-up,
// and every rank gets their figures.
//   latency:   the median of kRoundTrips 8-byte round trips, halved;
//   overhead:  kBurst 8-byte messages posted at once from a to b, closed by an acknowledgement: (elapsed - one round
//              trip) / kBurst, the median of kBursts; the per-message gap of whichever end is slower, which their
//              CPUs pay one message after another however many are in flight (the sharded servers' n-1);
//   bandwidth: `bytes` streamed from a to b as the pipelines send (chunks of the pipeline size, `slots` in
//              flight: over RxM that is its eager size, see CommunicatorImpl::fit_chunks_to_provider), closed by
//              an 8-byte acknowledgement: bytes / (elapsed - one round trip).
// One direction only: the algorithms load both directions, but the emulated links and EFA are full duplex, and a
// shared direction would measure the provider's flow control rather than the link.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/algorithms.hpp"
#include "algo/select.hpp"

namespace hiercoll::algo {
namespace {

constexpr int kRoundTrips = 16;
constexpr int kWarmUps = 2;
constexpr int kBurst = 32;
constexpr int kBursts = 5;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The middle of `values` (reordered).
double median(std::vector<double>& values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// `me` is 0 on the sender of the stream (a), 1 on its receiver (b); `pair` numbers them so.
LinkFigures measure(Channel& pair, size_t bytes) {
  const int me = pair.rank(), peer = 1 - me;
  uint64_t word = 0;
  uint32_t step = 0;
  std::vector<double> trips;
  for (int t = 0; t < kWarmUps + kRoundTrips; ++t, step += 2) {
    const auto start = Clock::now();
    if (me == 0) {
      pair.wait(pair.send(peer, step, &word, sizeof(word)));
      pair.wait(pair.recv(peer, step + 1, &word, sizeof(word)));
    } else {
      pair.wait(pair.recv(peer, step, &word, sizeof(word)));
      pair.wait(pair.send(peer, step + 1, &word, sizeof(word)));
    }
    if (t >= kWarmUps) trips.push_back(seconds_since(start));
  }
  const double round_trip = median(trips);
  // The receiver of a burst or the stream tells its sender it has all of it, on `step`.
  auto acknowledge = [&] {
    if (me == 0) {
      pair.wait(pair.recv(peer, step, &word, sizeof(word)));
    } else {
      pair.wait(pair.send(peer, step, &word, sizeof(word)));
    }
  };

  std::vector<uint64_t> words(kBurst);
  std::vector<RequestPtr> burst(kBurst);
  std::vector<double> gaps;
  for (int b = 0; b < kBursts; ++b) {
    const auto start = Clock::now();
    for (int m = 0; m < kBurst; ++m, ++step) {
      burst[m] = me == 0 ? pair.send(peer, step, &words[m], sizeof(uint64_t))
                         : pair.recv(peer, step, &words[m], sizeof(uint64_t));
    }
    for (RequestPtr& request : burst) pair.wait(request);
    acknowledge();
    ++step;
    gaps.push_back(std::max(seconds_since(start) - round_trip, 0.0) / kBurst);
  }
  const double gap = median(gaps);

  const size_t chunk = std::max<size_t>(1, pair.config().chunk_bytes);
  const size_t slots = static_cast<size_t>(std::max(1, pair.config().slots));
  const size_t chunks = (bytes + chunk - 1) / chunk;
  auto* buffer = static_cast<uint8_t*>(pair.scratch().get(chunk * slots));
  std::memset(buffer, 0, chunk * slots);
  auto length = [&](size_t c) { return std::min(chunk, bytes - c * chunk); };
  std::vector<RequestPtr> window(slots);
  const auto start = Clock::now();
  for (size_t c = 0; c < chunks; ++c, ++step) {
    RequestPtr& slot = window[c % slots];
    if (slot) pair.wait(slot);
    uint8_t* data = buffer + (c % slots) * chunk;
    slot = me == 0 ? pair.send(peer, step, data, length(c)) : pair.recv(peer, step, data, length(c));
  }
  for (RequestPtr& slot : window) {
    if (slot) pair.wait(slot);
  }
  acknowledge();
  const double elapsed = seconds_since(start);
  LinkFigures figures;
  figures.latency_us = round_trip / 2 * 1e6;
  figures.overhead_us = gap * 1e6;
  figures.bandwidth_gbps = static_cast<double>(bytes) / std::max(elapsed - round_trip, 1e-9) / 1e9;
  return figures;
}

}  // namespace

LinkFigures probe_link(Channel& ch, int a, int b, size_t bytes) {
  double figures[3] = {0, 0, 0};
  if (ch.rank() == a || ch.rank() == b) {
    const std::vector<int> ends = {ch.world_rank(a), ch.world_rank(b)};
    Channel pair = ch.subgroup(ends, ch.rank() == a ? 0 : 1, 0);
    // At most 2^14 chunks: the stream's steps stay below the broadcast's, which start at 2^15.
    const size_t most = std::max<size_t>(1, ch.config().chunk_bytes) << 14;
    const LinkFigures measured = measure(pair, std::min(std::max<size_t>(bytes, 1), most));
    figures[0] = measured.latency_us;
    figures[1] = measured.bandwidth_gbps;
    figures[2] = measured.overhead_us;
  }
  // From a to everyone, on steps of their own, so that every rank's cost model (and so every choice) is the same.
  std::vector<int> all;
  for (int r = 0; r < ch.size(); ++r) all.push_back(ch.world_rank(r));
  Channel everyone = ch.subgroup(all, ch.rank(), 1u << 15);
  broadcast_chain(everyone, figures, figures, sizeof(figures), a);
  LinkFigures result;
  result.latency_us = figures[0];
  result.bandwidth_gbps = figures[1];
  result.overhead_us = figures[2];
  return result;
}

}  // namespace hiercoll::algo
