// Recursive doubling: log2(p) exchange-and-reduce rounds among the largest power of two p <= n ranks; the n-p
// extra ranks first fold their data into a partner and get the result back. Partners always reduce (lower rank's
// data, higher rank's data), so every rank computes the same bits even for operations that are not bitwise
// commutative (min/max of signed zeros, NaNs).
//
// Every transfer goes in messages of at most the channel's chunk size, a window of them in flight, and each chunk
// is reduced as it arrives. One message per transfer would be the fewest, but over RxM (the tcp provider) a message
// above its eager size waits for a handshake that queues behind the partner's data coming the other way: a 2-rank
// allreduce, which this algorithm serves at every size, then got half the link (docs/cluster.md).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {
namespace {

// One transfer of `count` elements in chunks: logical step s, chunk c travels as step s * chunks + c.
class Chunked {
 public:
  Chunked(Channel& ch, size_t count, size_t elem)
      : ch_(ch),
        elem_(elem),
        count_(count),
        chunk_(std::max<size_t>(1, ch.config().chunk_bytes / elem)),
        chunks_((count + chunk_ - 1) / chunk_),
        window_(std::max<size_t>(1, static_cast<size_t>(ch.config().slots))) {}

  /// Sends `from` to `peer` at logical step `step`.
  void send(int peer, uint32_t step, const void* from) {
    std::vector<RequestPtr> sends;
    for (size_t c = 0; c < chunks_; ++c) {
      sends.push_back(ch_.send(peer, unit(step, c), bytes(from, c), length(c)));
      if (sends.size() >= window_) ch_.wait(sends[sends.size() - window_]);
    }
    ch_.wait_all(sends);
  }

  /// Receives from `peer` into `into`, calling `arrived(offset, n)` for each chunk as it lands.
  template <class Arrived>
  void recv(int peer, uint32_t step, void* into, Arrived arrived) {
    exchange(peer, step, nullptr, into, arrived);
  }

  /// Sends `from` (unless null) to `peer` while receiving the same step from it into `into`; `arrived(offset, n)`
  /// runs for each chunk once it has landed and `from`'s chunk at the same offset has left (so it may rewrite it).
  template <class Arrived>
  void exchange(int peer, uint32_t step, const void* from, void* into, Arrived arrived) {
    std::vector<RequestPtr> recvs(chunks_), sends(chunks_);
    auto post = [&](size_t c) {
      recvs[c] = ch_.recv(peer, unit(step, c), bytes(into, c), length(c));
      if (from) sends[c] = ch_.send(peer, unit(step, c), bytes(from, c), length(c));
    };
    for (size_t c = 0; c < std::min(window_, chunks_); ++c) post(c);
    for (size_t c = 0; c < chunks_; ++c) {
      ch_.wait(recvs[c]);
      if (sends[c]) ch_.wait(sends[c]);
      arrived(c * chunk_, std::min(chunk_, count_ - c * chunk_));
      if (c + window_ < chunks_) post(c + window_);
    }
  }

 private:
  uint32_t unit(uint32_t step, size_t c) const {
    return step * static_cast<uint32_t>(chunks_) + static_cast<uint32_t>(c);
  }
  size_t length(size_t c) const { return std::min(chunk_, count_ - c * chunk_) * elem_; }
  template <class T>
  T* bytes(T* base, size_t c) const {
    using Byte = std::conditional_t<std::is_const_v<T>, const uint8_t, uint8_t>;
    return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) + c * chunk_ * elem_);
  }

  Channel& ch_;
  size_t elem_, count_, chunk_, chunks_, window_;
};

}  // namespace

void allreduce_recursive_doubling(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  const size_t elem = dtype_size(type), bytes = count * elem;
  const int n = ch.size(), r = ch.rank();
  if (n == 1 || count == 0) {
    copy_bytes(out, in, bytes);
    return;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  auto* incoming = static_cast<uint8_t*>(ch.scratch().get(bytes, 0));
  auto* result = static_cast<uint8_t*>(out);
  const auto* input = static_cast<const uint8_t*>(in);
  Chunked transfer(ch, count, elem);
  uint32_t step = 0;

  uint32_t result_step = 1;  // after the fold (step 0) and the log2(p) rounds
  for (int mask = 1; mask < p; mask <<= 1) ++result_step;
  if (r >= p) {  // extra rank: fold into r - p, then wait for the result
    transfer.send(r - p, step, in);
    transfer.recv(r - p, result_step, out, [](size_t, size_t) {});
    return;  // the partner already averaged
  }
  if (r < n - p) {
    transfer.recv(r + p, step, incoming, [&](size_t at, size_t len) {
      reduce::reduce(result + at * elem, input + at * elem, incoming + at * elem, len, type, op);
    });
  } else {
    copy_bytes(out, in, bytes);
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    ++step;
    const int partner = r ^ mask;
    transfer.exchange(partner, step, out, incoming, [&](size_t at, size_t len) {
      uint8_t* mine = result + at * elem;
      const uint8_t* theirs = incoming + at * elem;
      if (r < partner) {
        reduce::reduce(mine, mine, theirs, len, type, op);
      } else {
        reduce::reduce(mine, theirs, mine, len, type, op);
      }
    });
  }
  if (op == ReduceOp::kAvg) reduce::divide(out, count, type, n);
  if (r < n - p) transfer.send(r + p, result_step, out);
}

}  // namespace hiercoll::algo
