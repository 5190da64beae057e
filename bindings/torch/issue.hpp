#pragma once
// What every c10d entry point of the binding shares: how it issues a call, and the checks and tags of its calls.
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "completion.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll_torch {

// User tags are ints >= 0; tags with the top bit set belong to collectives built from send/recv.
constexpr uint32_t kCollectiveTag = 0x80000000u;

inline void check_rank(int rank, int size, const char* what, const char* op) {
  TORCH_CHECK(rank >= 0 && rank < size, "hiercoll ", op, ": ", what, " ", rank, " is outside the group of ", size);
}

// A call whose results are in the caller's tensors, reading or writing `buffers` of its own as well.
inline CallTensors keeping(std::vector<at::Tensor> buffers) { return CallTensors{std::move(buffers), {}}; }

// Every c10d call runs its body through this: the call's start is noted (its Work's duration counts from here), and
// hiercoll's errors raised while it is issued (usage errors, mostly) reach Python with the call named.
template <class F>
auto issue(const char* op, int rank, F&& body) -> decltype(body()) {
  call_start() = std::chrono::steady_clock::now();
  GroupRecord::drop_stashed();  // what an earlier call that threw recorded and never submitted
  try {
    return body();
  } catch (const hiercoll::Error& e) {
    throw_as_torch(e, op, rank);
  }
}

}  // namespace hiercoll_torch
