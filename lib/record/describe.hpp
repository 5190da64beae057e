#pragma once
// How errors, logs, the flight recorder and the mismatch check name an operation: one writer of those names, so
// that a rank's error and its peers' records read alike.
#include <cstddef>
#include <string>

#include "algo/kind.hpp"
#include "algo/select.hpp"
#include "hiercoll/types.hpp"

namespace hiercoll::record {

/// Appends the operation's name to `out`: "allreduce(1000 x float32) sum", "broadcast(100 x float32) root 0",
/// "send(4 x int32)". `op`: the reduction, null where the operation does not reduce; `root` -1: none. It appends to a
/// buffer the caller may reuse because it runs for every operation (an ostringstream showed in a small allreduce's
/// profile).
void describe_into(std::string& out, const char* name, size_t count, DataType type, const ReduceOp* op = nullptr,
                   int root = -1);
/// A collective's name as describe_into writes it, from its kind's row (algo/kind.hpp): the op where it reduces,
/// the root where it has one, "barrier" alone (it has no buffers).
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

}  // namespace hiercoll::record
