// Dissemination barrier: ceil(log2 n) rounds of empty messages to r + 2^k.
#include "algo/algorithms.hpp"

namespace hiercoll::algo {

void barrier_dissemination(Channel& ch) {
  const int n = ch.size(), r = ch.rank();
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    auto recv = ch.recv((r - distance + n) % n, round, nullptr, 0);
    auto send = ch.send((r + distance) % n, round, nullptr, 0);
    ch.wait(send);
    ch.wait(recv);
  }
}

}  // namespace hiercoll::algo
