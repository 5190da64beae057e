#pragma once
// The collectives, as calls name them, one row each: what the selector chooses an algorithm for, what the engine
// checks a call's buffers against (engine/collective.cpp's validate), how the flight recorder and errors name a
// call, what the mismatch check compares. A new kind is a value of Kind before kEnd and a row of kKindRows; the
// static_asserts below refuse a table that does not have one row per kind in order.
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace hiercoll::algo {

/// 0 is no kind (a zeroed descriptor in the mismatch check); kEnd counts them.
enum class Kind : uint32_t {
  kAllreduce = 1,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kReduce,
  kAlltoall,
  kBarrier,
  kEnd
};

/// Tables indexed by a Kind's value (entry 0 unused) have this many entries.
inline constexpr size_t kKindSlots = static_cast<size_t>(Kind::kEnd);

/// How large one side of a call is, in elements: none, the call's count, or the count for every rank.
enum class Extent : uint8_t { kNone, kCount, kRanks };

/// Where the input lies in the output when a call runs in place (the one form in which they may overlap).
enum class InPlace : uint8_t {
  kNone,          ///< no buffers
  kSame,          ///< input = output
  kOutputInside,  ///< the output is this rank's part of the input (reduce-scatter)
  kInputInside,   ///< the input is this rank's part of the output (allgather)
};

struct KindRow {
  Kind kind;
  const char* name;
  bool reduces;  ///< takes a ReduceOp (its name carries it)
  bool rooted;   ///< takes a root rank
  Extent in, out;
  bool in_at_root_only;   ///< only the root reads an input (broadcast)
  bool out_at_root_only;  ///< only the root writes an output (reduce)
  InPlace in_place;
};

// Columns: kind, name, reduces, rooted, input extent, output extent, only the root reads, only the root writes,
// in-place placement.
// clang-format off
inline constexpr KindRow kKindRows[] = {
  {Kind::kAllreduce,     "allreduce",      true,  false, Extent::kCount, Extent::kCount, false, false, InPlace::kSame},
  {Kind::kReduceScatter, "reduce_scatter", true,  false, Extent::kRanks, Extent::kCount, false, false,
   InPlace::kOutputInside},
  {Kind::kAllgather,     "allgather",      false, false, Extent::kCount, Extent::kRanks, false, false,
   InPlace::kInputInside},
  {Kind::kBroadcast,     "broadcast",      false, true,  Extent::kCount, Extent::kCount, true,  false, InPlace::kSame},
  {Kind::kReduce,        "reduce",         true,  true,  Extent::kCount, Extent::kCount, false, true,  InPlace::kSame},
  {Kind::kAlltoall,      "alltoall",       false, false, Extent::kRanks, Extent::kRanks, false, false, InPlace::kSame},
  {Kind::kBarrier,       "barrier",        false, false, Extent::kNone,  Extent::kNone,  false, false, InPlace::kNone},
};
// clang-format on

constexpr bool kind_rows_in_order() {
  for (size_t i = 0; i < std::size(kKindRows); ++i) {
    if (static_cast<size_t>(kKindRows[i].kind) != i + 1) return false;
  }
  return true;
}
static_assert(std::size(kKindRows) + 1 == kKindSlots, "one row of kKindRows per Kind");
static_assert(kind_rows_in_order(), "kKindRows in the order of Kind");

/// Whether `kind` is one of the kinds (a value a caller or a peer's descriptor may have made up is not).
constexpr bool is_kind(Kind kind) { return static_cast<size_t>(kind) >= 1 && static_cast<size_t>(kind) < kKindSlots; }

/// The row of `kind`, which must be one (is_kind).
constexpr const KindRow& row_of(Kind kind) { return kKindRows[static_cast<size_t>(kind) - 1]; }

/// Whether a kind moves data at all (a barrier does not: its name is all there is to say of it).
constexpr bool has_buffers(const KindRow& row) { return row.in != Extent::kNone || row.out != Extent::kNone; }

inline const char* to_string(Kind kind) { return is_kind(kind) ? row_of(kind).name : "?"; }

}  // namespace hiercoll::algo
