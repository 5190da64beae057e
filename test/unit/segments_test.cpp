#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>

#include "algo/algorithms.hpp"
#include "algo/channel.hpp"

using namespace hiercoll::algo;

TEST_CASE("even segments tile the buffer with sizes differing by at most one", "[algo]") {
  for (size_t total : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{1001}}) {
    for (int n : {1, 2, 3, 5, 8}) {
      Segments s = Segments::even(total, n);
      REQUIRE(s.count.size() == static_cast<size_t>(n));
      REQUIRE(std::accumulate(s.count.begin(), s.count.end(), size_t{0}) == total);
      for (int i = 1; i < n; ++i) REQUIRE(s.offset[i] == s.offset[i - 1] + s.count[i - 1]);
      auto [lo, hi] = std::minmax_element(s.count.begin(), s.count.end());
      REQUIRE(*hi - *lo <= 1);
    }
  }
}

TEST_CASE("aligned segments tile the buffer, start on multiples and stay within two multiples of each other",
          "[algo]") {
  for (size_t total : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{100}, size_t{1001}, size_t{65537}}) {
    for (int n : {1, 2, 3, 5, 8}) {
      for (size_t multiple : {size_t{1}, size_t{8}, size_t{16}}) {
        Segments s = Segments::aligned(total, n, multiple);
        INFO("total " << total << " n " << n << " multiple " << multiple);
        REQUIRE(s.count.size() == static_cast<size_t>(n));
        REQUIRE(std::accumulate(s.count.begin(), s.count.end(), size_t{0}) == total);
        REQUIRE(s.offset[0] == 0);
        for (int i = 1; i < n; ++i) REQUIRE(s.offset[i] == s.offset[i - 1] + s.count[i - 1]);
        for (int i = 0; i < n; ++i) {
          // Every part that holds anything starts on a multiple: vector loads of each shard stay aligned.
          if (s.count[i] > 0) CHECK(s.offset[i] % multiple == 0);
        }
        auto [lo, hi] = std::minmax_element(s.count.begin(), s.count.end());
        // Whole multiples split evenly (one apart at most); the last part may also lose the partial one.
        CHECK(*hi - *lo < 2 * multiple);
      }
    }
  }
}

TEST_CASE("tags keep communicator, sender, operation and step apart", "[algo]") {
  Tag a = collective_tag(7, 3, 100, 5);
  CHECK(tag_source(a) == 3);
  CHECK(a != collective_tag(8, 3, 100, 5));
  CHECK(a != collective_tag(7, 4, 100, 5));
  CHECK(a != collective_tag(7, 3, 101, 5));
  CHECK(a != collective_tag(7, 3, 100, 6));
  CHECK(tag_source(collective_tag(0xffff, kMaxWorldRanks - 1, 0xffff, 0xffff)) == kMaxWorldRanks - 1);
  CHECK(p2p_tag(7, 3, 5) != collective_tag(7, 3, 0, 5));  // point-to-point never matches a collective
  CHECK(tag_source(p2p_tag(7, 3, 0xffffffffu)) == 3);
}
