#pragma once
// Every collective call becomes one Collective and takes one path, CommunicatorImpl::collective (as NCCL's single
// argument check and enqueue): validate on the caller's thread, let the selector choose the algorithm, build the
// algorithm's host body (and, for device buffers, its device issue), enqueue.
#include <cstddef>
#include <string>

#include "algo/select.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/types.hpp"
#include "record/describe.hpp"

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

}  // namespace hiercoll::engine
