// Recursive doubling for small messages: log2(p) exchange-and-reduce rounds among the largest power of
// two p <= n ranks; the n-p extra ranks first fold their data into a partner and get the result back.
// Partners always reduce (lower rank's data, higher rank's data), so every rank computes the same bits
// even for operations that are not bitwise commutative (min/max of signed zeros, NaNs).
#include <cstring>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

void allreduce_recursive_doubling(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  const size_t bytes = count * dtype_size(type);
  const int n = ch.size(), r = ch.rank();
  if (n == 1 || count == 0) {
    copy_bytes(out, in, bytes);
    return;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  void* incoming = ch.scratch().get(bytes, 0);
  uint32_t step = 0;

  uint32_t result_step = 1;  // after the fold (step 0) and the log2(p) rounds
  for (int mask = 1; mask < p; mask <<= 1) ++result_step;
  if (r >= p) {  // extra rank: fold into r - p, then wait for the result
    auto send = ch.send(r - p, step, in, bytes);
    auto recv = ch.recv(r - p, result_step, out, bytes);
    ch.wait(send);
    ch.wait(recv);
    return;  // the partner already averaged
  }
  if (r < n - p) {
    auto recv = ch.recv(r + p, step, incoming, bytes);
    ch.wait(recv);
    reduce::reduce(out, in, incoming, count, type, op);
  } else {
    copy_bytes(out, in, bytes);
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    ++step;
    int partner = r ^ mask;
    auto recv = ch.recv(partner, step, incoming, bytes);
    auto send = ch.send(partner, step, out, bytes);
    ch.wait(recv);
    ch.wait(send);  // `out` is rewritten next, so the send must have left it
    if (r < partner) {
      reduce::reduce(out, out, incoming, count, type, op);
    } else {
      reduce::reduce(out, incoming, out, count, type, op);
    }
  }
  if (op == ReduceOp::kAvg) reduce::divide(out, count, type, n);
  if (r < n - p) {
    auto send = ch.send(r + p, result_step, out, bytes);
    ch.wait(send);
  }
}

}  // namespace hiercoll::algo
