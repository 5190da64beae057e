#pragma once
// Algorithm selection (docs/design.md, "Choosing an algorithm"): a table of rows, each an algorithm that may run a
// kind of collective and where. Allreduce rows are priced by an alpha-beta cost model, every algorithm's time
//   latency x steps + bytes on the bottleneck link / its bandwidth,
// or, where that is less, the CPU time its messages take a rank (LogP's overhead: per message sent or received,
// times the ranks that share each core while they all send), and the cheapest eligible one is chosen per call;
// HIERCOLL_ALGO forces one. Other kinds take their first eligible row.
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "algo/kind.hpp"
#include "base/settings.hpp"
#include "hiercoll/topology.hpp"

namespace hiercoll::algo {

/// Every algorithm the selector can choose. Allreduce: ring, recursive doubling, hierarchical, sharded
/// (SageMaker's sharded reduction servers: the hierarchical allreduce's inter-node phase where the layout allows
/// one, else over all ranks); reduce-scatter and allgather: ring, or node (through the node's peer memory, all ranks
/// on one node); broadcast and reduce: chain; alltoall: pairwise; barrier: dissemination. Their names, and which
/// HIERCOLL_ALGO may force, are the rows of kAlgorithmNames (select.cpp); which kinds each runs and when, the rows of
/// kChoices; how the engine runs each (algorithm, kind), the rows of engine/schedules.cpp.
/// kEnd counts them: a new algorithm is a value before it and a row of kAlgorithmNames (select.cpp asserts one row
/// per value, in order).
enum class Algorithm {
  kRing,
  kRecursiveDoubling,
  kHierarchical,
  kSharded,
  kNode,
  kChain,
  kPairwise,
  kDissemination,
  kEnd
};
inline constexpr size_t kAlgorithmCount = static_cast<size_t>(Algorithm::kEnd);
const char* to_string(Algorithm algo);
/// The algorithm HIERCOLL_ALGO names ("ring", "rd", "hier", "sharded"); throws InvalidUsageError listing those it
/// accepts for any other name.
Algorithm forced_algorithm(const std::string& name);
/// The names HIERCOLL_ALGO accepts, comma-separated: "ring, rd, hier, sharded".
std::string forceable_names();

struct LinkFigures {
  double latency_us = 50;     ///< per message
  double bandwidth_gbps = 1;  ///< GB/s (1e9 bytes per second)
  /// CPU time a rank spends on each message it sends or receives, which its other messages cannot overlap: the gap
  /// between small messages streamed one way (the link probe), LogP's overhead.
  double overhead_us = 2;
  double seconds(double bytes) const { return latency_us * 1e-6 + bytes / (bandwidth_gbps * 1e9); }
};

/// HIERCOLL_SHM_PIECE_BYTES's defaults: the hierarchical allreduce's piece across nodes, where it is also the network
/// pipeline's unit, and on one node, where a piece is all intra-node work and one that stays in
/// a core's L2 with its input and output costs less (figures: `git log -S kOneNodePieceBytes`).
inline constexpr size_t kPieceBytes = 2 << 20;
inline constexpr size_t kOneNodePieceBytes = 512 << 10;

struct CostModel {
  LinkFigures net;  ///< the fabric between ranks (HIERCOLL_NET_LAT_US, HIERCOLL_NET_BW_GBPS)
  LinkFigures shm;  ///< copies through node shared memory (HIERCOLL_SHM_LAT_US, HIERCOLL_SHM_BW_GBPS)
  size_t shm_piece_bytes = kPieceBytes;  ///< HIERCOLL_SHM_PIECE_BYTES, or the default for the layout
  /// The largest message the pipelines send over the network (their chunk: HIERCOLL_CHUNK_BYTES, or the provider's
  /// eager size, engine): each costs its overhead.
  size_t net_message_bytes = 1 << 20;
  /// Ranks that may run on each of this rank's CPUs (topo::ranks_per_cpu, measured at start-up): above 1, ranks
  /// that send at once queue for the cores and every message's overhead grows by as much.
  double ranks_per_cpu = 1;

  /// Predicted seconds for an allreduce of `bytes` on `layout`.
  double ring(double bytes, const Layout& layout) const;
  double recursive_doubling(double bytes, const Layout& layout) const;
  /// `device`: on device buffers (the form it takes depends on it: hier_variant).
  double hierarchical(double bytes, const Layout& layout, bool device = false) const;
  /// Sharded reduction servers: inside the hierarchical allreduce where the layout is regular with several ranks
  /// per node (`hierarchical` true), else over all ranks.
  double sharded(double bytes, const Layout& layout, bool hierarchical, bool device = false) const;

  /// The model of `settings`' figures; CostModel::from(base::Settings::defaults()) is the default one.
  static CostModel from(const base::Settings& settings);
};

class Channel;
/// Measures the fabric between group ranks `a` and `b` (on different nodes) of `ch`: round trips of 8 bytes, then
/// `bytes` streamed from a to b in the pipelines' chunks (link_probe.cpp). Every rank of `ch` calls it and gets
/// a's figures; ranks other than a and b only take part in handing them out.
LinkFigures probe_link(Channel& ch, int a, int b, size_t bytes);

/// Smallest message for which the ring beats recursive doubling among `ranks` ranks of the fabric.
size_t crossover_bytes(const CostModel& model, int ranks);

/// What a choice depends on besides the size: the communicator's layout, whether its node structure can be used
/// (regular, several ranks per node: the hierarchical schedules), the buffers' memory, HIERCOLL_ALGO.
struct Situation {
  const Layout* layout = nullptr;
  bool hierarchy_ready = false;
  bool device = false;       ///< CUDA device buffers
  bool flat_forced = false;  ///< HIERCOLL_ALGO names a flat algorithm (ring or rd): the other kinds stay flat too
};

/// One row of the selector's table: `algorithm` may run collectives of `kind` where `eligible` holds. Allreduce rows
/// carry the cost model's time: the cheapest eligible row wins, `margin` times its time (what the model does not
/// price), the earlier row on a tie. Other kinds take their first eligible row.
struct Choice {
  Kind kind;
  Algorithm algorithm;
  bool (*eligible)(const Situation& s);
  double (*seconds)(const CostModel& m, double bytes, const Situation& s) = nullptr;
  double margin = 1.0;
};
/// The table, in order of preference within each kind (select.cpp).
const std::vector<Choice>& choices();

/// Chooses the algorithm of every collective from choices(): the one place an algorithm is decided.
class Selector {
 public:
  /// `forced`: HIERCOLL_ALGO's value ("" lets the cost model choose).
  Selector(CostModel model, Layout layout, bool hierarchy_ready, const std::string& forced = "");
  /// The algorithm for an allreduce of `bytes` on host buffers: forced by HIERCOLL_ALGO, else the cheapest eligible.
  Algorithm choose(size_t bytes) const;
  /// The same for device buffers, where the hierarchical schedules are the only ones eligible when the layout allows
  /// them (their intra-node phases run on the GPUs and only 1/L of the data crosses host memory).
  Algorithm choose_for_device(size_t bytes) const;
  /// The algorithm for any collective of `bytes` (the caller's buffer size) on host or device buffers: the one
  /// place every collective's algorithm is decided.
  Algorithm choose(Kind kind, size_t bytes, bool device) const;
  bool hierarchical_eligible() const { return hierarchy_ready_; }
  /// HIERCOLL_ALGO asks for a flat algorithm (ring or rd): the other collectives keep to the flat ones too.
  bool flat_forced() const;
  const CostModel& model() const { return model_; }
  /// The cost model's predicted allreduce time (µs) per allreduce row at sizes 8 B x 8^k up to 128 MB ("-" where the
  /// row is not eligible), and the choice at each: what HIERCOLL_DEBUG=INFO prints at start-up, as NCCL prints its
  /// tuning table.
  std::string tuning_table() const;

 private:
  CostModel model_;
  Layout layout_;
  bool hierarchy_ready_;
  bool forced_ = false;
  Algorithm forced_algo_ = Algorithm::kRing;
  Situation situation(bool device) const { return {&layout_, hierarchy_ready_, device, flat_forced()}; }
  // The cheapest eligible allreduce row for `bytes`.
  Algorithm model_choice(size_t bytes, bool device) const;
  // The cost model's answers for recent sizes on host buffers (training repeats its bucket sizes): evaluating the
  // model shows in a small allreduce's profile. Entry: (bytes + 1) << 8 | algorithm, 0 when empty; any thread.
  static constexpr size_t kRemembered = 8;  // select.cpp indexes by the top 3 bits of a hash
  mutable std::atomic<uint64_t> remembered_[kRemembered] = {};
  // The other kinds' choices depend on nothing a call passes but where its buffers are: made once, read per call
  // (indexed by Kind, then device buffers or not; kAllreduce's entries unused).
  Algorithm fixed_[kKindSlots][2] = {};
};

}  // namespace hiercoll::algo
