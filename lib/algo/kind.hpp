#pragma once
// The collectives, as calls name them: what the selector chooses an algorithm for and the mismatch check compares.
#include <cstdint>

namespace hiercoll::algo {

enum class Kind : uint32_t { kAllreduce = 1, kReduceScatter, kAllgather, kBroadcast, kReduce, kAlltoall, kBarrier };

inline const char* to_string(Kind kind) {
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

}  // namespace hiercoll::algo
