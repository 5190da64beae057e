#pragma once
// Every collective call becomes one Collective and takes one path, CommunicatorImpl::collective (as NCCL's single
// argument check and enqueue): validate on the caller's thread, let the selector choose the algorithm, build the
// algorithm's host body (and, for device buffers, its device issue), enqueue.
#include <cstddef>
#include <string>

#include "algo/select.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/types.hpp"

namespace hiercoll::engine {

struct Collective {
  algo::Kind kind = algo::Kind::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  /// Elements: of the whole buffer for allreduce, broadcast and reduce; of one rank's part for reduce_scatter
  /// (received), allgather (sent) and alltoall (per peer).
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  ///< allreduce, reduce_scatter, reduce
  int root = -1;                 ///< broadcast, reduce
  CallOptions options;
};

/// The one way errors, logs, the flight recorder and the mismatch check name an operation, appended to `out`:
/// "allreduce(1000 x float32) sum", "broadcast(100 x float32) root 0", "send(4 x int32)". `op`: the reduction,
/// null where the operation does not reduce; `root` -1: none. It appends to a buffer the caller may reuse because it
/// runs for every operation (an ostringstream cost about a tenth of an 8-byte allreduce on one node).
void describe_into(std::string& out, const char* name, size_t count, DataType type, const ReduceOp* op = nullptr,
                   int root = -1);
/// A collective's name as describe_into writes it ("barrier" alone, it has no buffers).
void describe_into(std::string& out, algo::Kind kind, size_t count, DataType type, ReduceOp op, int root);

/// A collective and the algorithm that runs it, as data: what the flight recorder keeps for a collective its caller
/// runs, to be named only if the record is read.
struct CollectiveName {
  algo::Kind kind = algo::Kind::kBarrier;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  algo::Algorithm algorithm = algo::Algorithm::kRing;
  bool on_device = false;
};
/// "allreduce(1000 x float32) sum [ring]" ("[ring, device]" on device buffers; "barrier" alone).
void describe_into(std::string& out, const CollectiveName& name);

}  // namespace hiercoll::engine
