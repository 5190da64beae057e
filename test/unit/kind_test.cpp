// The kinds' rows (algo/kind.hpp) against the test table (collective_cases.hpp), which states every collective's
// shape independently, as the serial references do: a kind added to one and not the other, or a shape the two
// disagree on, fails here before any multi-rank test runs it.
#include "algo/kind.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "collective_cases.hpp"
#include "record/describe.hpp"

using namespace hiercoll;

namespace {

size_t elems(algo::Extent e, const test::CaseArgs& a) {
  switch (e) {
    case algo::Extent::kNone: return 0;
    case algo::Extent::kCount: return a.count;
    case algo::Extent::kRanks: return a.count * static_cast<size_t>(a.size);
  }
  return 0;
}

}  // namespace

TEST_CASE("every collective kind with buffers has the test table's row, and they agree on its shape", "[kind]") {
  size_t with_buffers = 0;
  for (const algo::KindRow& row : algo::kKindRows) {
    INFO(row.name);
    CHECK(std::string(algo::to_string(row.kind)) == row.name);
    if (!algo::has_buffers(row)) continue;  // a barrier: nothing to compare
    ++with_buffers;
    const test::CollectiveCase& c = test::collective_case(row.name);
    CHECK(c.reduces == row.reduces);
    CHECK(c.rooted == row.rooted);
    // The table runs a kind in place only where the library places the input as it does (it may leave one out).
    if (c.in_place != test::InPlace::kNone) {
      const auto expected = row.in_place == algo::InPlace::kOutputInside  ? test::InPlace::kOutsideIn
                            : row.in_place == algo::InPlace::kInputInside ? test::InPlace::kInsideOut
                                                                          : test::InPlace::kSame;
      CHECK(c.in_place == expected);
    }
    for (int size : {1, 3, 8}) {
      for (int rank = 0; rank < size; ++rank) {
        const int root = row.rooted ? size - 1 : -1;
        const test::CaseArgs a{rank, size, 5, DataType::kFloat32, ReduceOp::kSum, root, false, 0};
        const bool at_root = rank == root;
        // Where only the root uses a side, the table may still hand the others a buffer there.
        if (!row.in_at_root_only || at_root) CHECK(c.in_elems(a) == elems(row.in, a));
        if (!row.out_at_root_only || at_root) CHECK(c.out_elems(a) == elems(row.out, a));
        if (row.out_at_root_only && !at_root) CHECK(c.out_elems(a) == 0);
      }
    }
  }
  CHECK(with_buffers == test::collective_cases().size());  // and the table has no row the library lacks
}

TEST_CASE("a collective is named from its kind's row: the op where it reduces, the root where it has one", "[kind]") {
  auto name = [](algo::Kind kind, int root) {
    std::string out;
    record::describe_into(out, kind, 4, DataType::kInt32, ReduceOp::kMax, root);
    return out;
  };
  CHECK(name(algo::Kind::kAllreduce, -1) == "allreduce(4 x int32) max");
  CHECK(name(algo::Kind::kReduce, 2) == "reduce(4 x int32) max root 2");
  CHECK(name(algo::Kind::kBroadcast, 1) == "broadcast(4 x int32) root 1");
  CHECK(name(algo::Kind::kAllgather, -1) == "allgather(4 x int32)");
  CHECK(name(algo::Kind::kBarrier, -1) == "barrier");
  CHECK(name(static_cast<algo::Kind>(0), -1) == "?");  // a peer's descriptor holding no kind
  CHECK(name(algo::Kind::kEnd, -1) == "?");
}
