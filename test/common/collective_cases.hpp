#pragma once
// The collectives as rows of one table, shared by the tests that check every collective against the serial
// reference of values.hpp on every rank: the multi-process worker (test/mp/mp_worker.cpp, host buffers) and the CUDA
// test (test/cuda/collectives_cuda_test.cu, device buffers). A row says how large a rank's buffers are, what its
// input holds, how the collective is called, and what each element of its output must be; each test walks the rows
// (for_each_run) with buffers of its own memory. A new collective's checks are one row here.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hiercoll/communicator.hpp"
#include "values.hpp"

namespace hiercoll::test {

/// One run of a case on one rank.
struct CaseArgs {
  int rank = 0, size = 1;
  size_t count = 0;  ///< elements, as the call takes them
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;  ///< -1: the collective has none
  bool in_place = false;
  uint32_t seed = 0;
};

/// Where an in-place run's input and output lie in the one buffer it uses.
enum class InPlace {
  kNone,       ///< the case runs out of place only
  kSame,       ///< output = input (allreduce, broadcast, alltoall)
  kOutsideIn,  ///< the output is this rank's part of the input (reduce-scatter)
  kInsideOut,  ///< the input is this rank's part of the output (allgather)
};

struct CollectiveCase {
  const char* name;
  bool reduces;  ///< runs for each op given; otherwise for sum alone (the data does not depend on it)
  bool rooted;   ///< runs for every root
  InPlace in_place;
  size_t (*in_elems)(const CaseArgs& a);
  size_t (*out_elems)(const CaseArgs& a);
  /// Element i of this rank's input.
  double (*input)(const CaseArgs& a, size_t i);
  /// Element i of this rank's output as the serial reference has it; nullopt where nothing is written there.
  std::optional<double> (*want)(const CaseArgs& a, size_t i);
  Work (*call)(Communicator& comm, const CaseArgs& a, const void* in, void* out, const CallOptions& options);
};

/// `v` as `type` stores it.
inline double rounded(DataType type, double v) {
  uint8_t cell[8];
  put(type, cell, 0, v);
  return get(type, cell, 0);
}

namespace cases {

inline size_t one(const CaseArgs& a) { return a.count; }
inline size_t all(const CaseArgs& a) { return a.count * static_cast<size_t>(a.size); }
inline size_t root_only(const CaseArgs& a) { return a.rank == a.root ? a.count : 0; }
inline double own(const CaseArgs& a, size_t i) { return input_value(a.rank, i, a.type, a.op, a.seed); }
inline double of(const CaseArgs& a, int rank, size_t i) {
  return rounded(a.type, input_value(rank, i, a.type, a.op, a.seed));
}

}  // namespace cases

/// The table: one row per collective.
inline const std::vector<CollectiveCase>& collective_cases() {
  using namespace cases;
  static const std::vector<CollectiveCase> table = {
      {"allreduce", true, false, InPlace::kSame, one, one, own,
       [](const CaseArgs& a, size_t i) -> std::optional<double> {
         return reference_value(a.size, i, a.type, a.op, a.seed);
       },
       [](Communicator& c, const CaseArgs& a, const void* in, void* out, const CallOptions& o) {
         return c.allreduce(in, out, a.count, a.type, a.op, o);
       }},
      // Rank r gets elements [r*count, (r+1)*count) of the reduction.
      {"reduce_scatter", true, false, InPlace::kOutsideIn, all, one, own,
       [](const CaseArgs& a, size_t i) -> std::optional<double> {
         return reference_value(a.size, static_cast<size_t>(a.rank) * a.count + i, a.type, a.op, a.seed);
       },
       [](Communicator& c, const CaseArgs& a, const void* in, void* out, const CallOptions& o) {
         return c.reduce_scatter(in, out, a.count, a.type, a.op, o);
       }},
      // Block j comes from rank j.
      {"allgather", false, false, InPlace::kInsideOut, one, all, own,
       [](const CaseArgs& a, size_t i) -> std::optional<double> {
         return of(a, static_cast<int>(i / a.count), i % a.count);
       },
       [](Communicator& c, const CaseArgs& a, const void* in, void* out, const CallOptions& o) {
         return c.allgather(in, out, a.count, a.type, o);
       }},
      // Only the root's input holds data; the others' is zeros, so that a peer that read its own input shows.
      {"broadcast", false, true, InPlace::kSame, one, one,
       [](const CaseArgs& a, size_t i) { return a.rank == a.root ? own(a, i) : 0.0; },
       [](const CaseArgs& a, size_t i) -> std::optional<double> { return of(a, a.root, i); },
       [](Communicator& c, const CaseArgs& a, const void* in, void* out, const CallOptions& o) {
         return c.broadcast(in, out, a.count, a.type, a.root, o);
       }},
      // Only the root's output is written.
      {"reduce", true, true, InPlace::kNone, one, root_only, own,
       [](const CaseArgs& a, size_t i) -> std::optional<double> {
         return reference_value(a.size, i, a.type, a.op, a.seed);
       },
       [](Communicator& c, const CaseArgs& a, const void* in, void* out, const CallOptions& o) {
         return c.reduce(in, out, a.count, a.type, a.op, a.root, o);
       }},
      // Block j of rank r's output is block r of rank j's input.
      {"alltoall", false, false, InPlace::kSame, all, all, own,
       [](const CaseArgs& a, size_t i) -> std::optional<double> {
         return of(a, static_cast<int>(i / a.count), static_cast<size_t>(a.rank) * a.count + i % a.count);
       },
       [](Communicator& c, const CaseArgs& a, const void* in, void* out, const CallOptions& o) {
         return c.alltoall(in, out, a.count, a.type, o);
       }},
  };
  return table;
}

/// The row named `name` ("allreduce", ...).
inline const CollectiveCase& collective_case(const std::string& name) {
  for (const CollectiveCase& c : collective_cases()) {
    if (name == c.name) return c;
  }
  throw std::invalid_argument("no collective case named " + name);
}

/// "reduce_scatter float32 sum count=5 in-place", with " root r" for rooted cases.
inline std::string case_name(const CollectiveCase& c, const CaseArgs& a) {
  std::string what = std::string(c.name) + " " + to_string(a.type) + " " + to_string(a.op) +
                     " count=" + std::to_string(a.count) + (a.in_place ? " in-place" : " out-of-place");
  if (a.root >= 0) what += " root " + std::to_string(a.root);
  return what;
}

/// Calls fn(args) for every run of `c` at `count` elements of `type` on `rank` of `size`: each of `ops` where the
/// case reduces (averages of floating types only), every root where it has one, in place and not where it can be.
/// Every rank makes the same runs in the same order.
template <class Fn>
void for_each_run(const CollectiveCase& c, int rank, int size, DataType type, size_t count,
                  const std::vector<ReduceOp>& ops, const std::vector<bool>& placements, uint32_t seed, Fn fn) {
  for (ReduceOp op : c.reduces ? ops : std::vector<ReduceOp>{ReduceOp::kSum}) {
    if (op == ReduceOp::kAvg && !is_floating(type)) continue;
    for (int root = c.rooted ? 0 : -1; root < (c.rooted ? size : 0); ++root) {
      for (bool in_place : placements) {
        if (in_place && c.in_place == InPlace::kNone) continue;
        fn(CaseArgs{rank, size, count, type, op, root, in_place, seed});
      }
    }
  }
}

/// Where a run's input and output begin, in elements, within the buffers it uses: an in-place run uses one
/// buffer (`out_at` and `in_at` both index it), an out-of-place run two (each at 0).
struct Placement {
  size_t buffer_elems[2] = {0, 0};  ///< the input buffer's, then the output buffer's (0: the run has one buffer)
  size_t in_at = 0, out_at = 0;
};

inline Placement placement(const CollectiveCase& c, const CaseArgs& a) {
  Placement p;
  const size_t in = c.in_elems(a), out = c.out_elems(a);
  if (!a.in_place) {
    p.buffer_elems[0] = in;
    p.buffer_elems[1] = out;
    return p;
  }
  switch (c.in_place) {
    case InPlace::kOutsideIn:
      p.buffer_elems[0] = in;
      p.out_at = static_cast<size_t>(a.rank) * out;
      break;
    case InPlace::kInsideOut:
      p.buffer_elems[0] = out;
      p.in_at = static_cast<size_t>(a.rank) * in;
      break;
    default: p.buffer_elems[0] = std::max(in, out); break;
  }
  return p;
}

}  // namespace hiercoll::test
