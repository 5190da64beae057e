#pragma once
// The table of schedules: for every (algorithm, kind) the selector can choose (algo/select.cpp), one row saying how
// the engine runs it: on the progress thread over a Channel, on device buffers through the node's peer memory, on
// the caller's thread in node memory alone. CommunicatorImpl::collective looks the row up and names no algorithm, so
// a new schedule is a row here (and the selector's choice of it); a new collective kind is also its row in
// algo/kind.hpp and its entry point (docs/design.md, "Adding an algorithm or a collective").
#include <functional>

#include "algo/channel.hpp"
#include "algo/hierarchy.hpp"
#include "algo/select.hpp"
#include "engine/communicator_impl.hpp"
#include "hiercoll/types.hpp"

namespace hiercoll::engine {

/// One validated collective's arguments, as the schedules take them.
struct Call {
  size_t count = 0;  ///< elements, as Collective::count
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  size_t in_bytes = 0, out_bytes = 0;  ///< what this rank reads and writes (validate)
  int world = 1;                       ///< ranks in the communicator
};

/// The operation on (input, output), run by the progress thread with the operation's Channel: the caller's host
/// buffers, or pinned host copies of device buffers.
using HostBody = std::function<void(algo::Channel&, const void* in, void* out)>;

struct Schedule {
  algo::Algorithm algorithm;
  algo::Kind kind;
  /// The body on host buffers.
  HostBody (*host)(CommunicatorImpl& impl, const Call& call);
  /// Where the schedule runs on device buffers directly (intra-node phases on the GPUs), its issue on the caller's
  /// `in` and `out`; null: device buffers are staged through host memory and run `host`.
  CommunicatorImpl::DeviceIssue (*device)(CommunicatorImpl& impl, const Call& call, const void* in, void* out);
  /// Where the schedule can need node memory alone (no Channel, no network): the whole operation on the caller's
  /// thread, bounded by `issue` (CommunicatorImpl::run_here); null: it needs the progress thread.
  void (*on_caller)(CommunicatorImpl& impl, const algo::OpContext& issue, const Call& call, const void* in, void* out);
  /// Where `on_caller` needs node memory alone only on some layouts, whether this communicator's is one; null: on
  /// every layout the selector chooses the row for.
  bool (*on_caller_fits)(CommunicatorImpl& impl) = nullptr;
  /// Where `on_caller` waits without naming its phase (a wait that builds no name costs less), the phase its errors
  /// name; null: its waits name themselves (OpContext::wait), or it has no `on_caller`.
  const char* (*on_caller_phase)(CommunicatorImpl& impl, const Call& call) = nullptr;
};

/// The row for (algorithm, kind). Throws InternalError for a pair the table lacks (a selector choice without a row).
const Schedule& schedule_of(algo::Algorithm algorithm, algo::Kind kind);

}  // namespace hiercoll::engine
