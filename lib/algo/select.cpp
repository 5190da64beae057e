#include "algo/select.hpp"

#include <cmath>

#include "base/log.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

const char* to_string(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllgather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kReduce: return "reduce";
    case Kind::kAlltoall: return "alltoall";
    case Kind::kBarrier: return "barrier";
  }
  return "?";
}

const char* to_string(Algorithm algo) {
  switch (algo) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "rd";
    case Algorithm::kHierarchical: return "hier";
    case Algorithm::kNode: return "node";
    case Algorithm::kChain: return "chain";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
  }
  return "?";
}

// Flat ring over n ranks: 2(n-1) steps of S/n each; every step crosses the fabric.
double CostModel::ring(double bytes, const Layout& layout) const {
  int n = layout.size;
  if (n == 1) return 0;
  return 2.0 * (n - 1) * net.seconds(bytes / n);
}

// Recursive doubling: ceil(log2 n) full-size exchanges, plus fold-in and fold-out for n not a power of two.
double CostModel::recursive_doubling(double bytes, const Layout& layout) const {
  int n = layout.size;
  if (n == 1) return 0;
  int rounds = static_cast<int>(std::floor(std::log2(n)));
  if ((1 << rounds) != n) rounds += 2;
  return rounds * net.seconds(bytes);
}

// Hierarchical: about 3S of shared-memory traffic per rank (copy in, reduce L shards of S/L, publish and
// copy out) plus two node barriers per piece, and an inter-node ring on S/L per local rank. The L rails
// share the node's link, so the node moves 2(N-1)/N * S through it, as one ring over N ranks would. The
// phases are pipelined over the pieces: the slower phase dominates, plus one piece of each to fill and drain.
double CostModel::hierarchical(double bytes, const Layout& layout) const {
  int nodes = layout.node_count, local = layout.local_size;
  double pieces = std::max(1.0, std::ceil(bytes / static_cast<double>(shm_piece_bytes)));
  double intra = local > 1 ? pieces * 2 * shm.latency_us * 1e-6 + 3 * bytes / (shm.bandwidth_gbps * 1e9) : 0;
  double inter = 0;
  if (nodes > 1) inter = 2.0 * (nodes - 1) * (net.latency_us * 1e-6 + bytes / nodes / (net.bandwidth_gbps * 1e9));
  return std::max(intra, inter) + (intra + inter) / pieces;
}

double CostModel::tree(double bytes, const Layout& layout) const {
  int n = layout.size;
  if (n == 1) return 0;
  double depth = std::ceil(std::log2(n));
  return 2 * depth * net.latency_us * 1e-6 + 2 * bytes / (net.bandwidth_gbps * 1e9);
}

CostModel CostModel::from(const base::Settings& settings) {
  CostModel model;
  model.net = {settings.net_lat_us, settings.net_bw_gbps};
  model.shm = {settings.shm_lat_us, settings.shm_bw_gbps};
  model.shm_piece_bytes = settings.shm_piece_bytes;
  return model;
}

size_t crossover_bytes(const CostModel& model, int ranks) {
  Layout flat = Layout::from_node_ids(std::vector<std::string>(static_cast<size_t>(std::max(1, ranks)), "n"), 0);
  size_t bytes = 1024;
  while (bytes < (size_t{1} << 34) &&
         model.recursive_doubling(static_cast<double>(bytes), flat) <= model.ring(static_cast<double>(bytes), flat)) {
    bytes *= 2;
  }
  return bytes / 2;
}

AllreduceSelector::AllreduceSelector(CostModel model, Layout layout, bool hierarchy_ready, const std::string& forced)
    : model_(model), layout_(std::move(layout)), hierarchy_ready_(hierarchy_ready) {
  if (!forced.empty()) {
    forced_ = true;
    if (forced == "ring") forced_algo_ = AllreduceAlgo::kRing;
    else if (forced == "rd") forced_algo_ = AllreduceAlgo::kRecursiveDoubling;
    else if (forced == "hier") forced_algo_ = AllreduceAlgo::kHierarchical;
    else throw InvalidUsageError("HIERCOLL_ALGO='" + forced + "' is not one of: ring, rd, hier");
    if (forced_algo_ == AllreduceAlgo::kHierarchical && !hierarchy_ready_) {
      HIERCOLL_LOG(
          kWarn, "HIERCOLL_ALGO=hier, but the layout (" << layout_.describe() << ") is irregular: using ring instead");
      forced_algo_ = AllreduceAlgo::kRing;
    }
  }
}

AllreduceAlgo AllreduceSelector::choose_for_device(size_t bytes) const {
  if (forced_) return forced_algo_;
  return hierarchy_ready_ ? AllreduceAlgo::kHierarchical : choose(bytes);
}

AllreduceAlgo AllreduceSelector::choose(size_t bytes) const {
  if (forced_) return forced_algo_;
  double size = static_cast<double>(bytes);
  AllreduceAlgo best = AllreduceAlgo::kRing;
  double best_time = model_.ring(size, layout_);
  double rd = model_.recursive_doubling(size, layout_);
  if (rd < best_time) {
    best = AllreduceAlgo::kRecursiveDoubling;
    best_time = rd;
  }
  if (hierarchy_ready_ && model_.hierarchical(size, layout_) < best_time) best = AllreduceAlgo::kHierarchical;
  return best;
}

Algorithm AllreduceSelector::choose(Kind kind, size_t bytes, bool device) const {
  switch (kind) {
    case Kind::kAllreduce: return device ? choose_for_device(bytes) : choose(bytes);
    case Kind::kReduceScatter:
    case Kind::kAllgather:
      // One node with peer memory: every rank reads the others' parts directly, one copy each, no ring steps.
      // HIERCOLL_ALGO=ring|rd keeps them on the ring.
      return hierarchy_ready_ && layout_.node_count == 1 && !flat_forced() ? Algorithm::kNode : Algorithm::kRing;
    case Kind::kBroadcast:
    case Kind::kReduce: return Algorithm::kChain;
    case Kind::kAlltoall: return Algorithm::kPairwise;
    case Kind::kBarrier: return Algorithm::kDissemination;
  }
  throw InvalidUsageError("unknown collective kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace hiercoll::algo
