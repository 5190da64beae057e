// base::AdaptiveSpin: how long a wait spins, from the waits before it.
#include <catch2/catch.hpp>

#include "base/spin.hpp"

using hiercoll::base::AdaptiveSpin;
using std::chrono::microseconds;

namespace {
void record_many(AdaptiveSpin& spin, microseconds each, int times = 100) {
  for (int i = 0; i < times; ++i) spin.record(each);
}
}  // namespace

TEST_CASE("a spin that cannot stretch spins its full budget after short waits and none after long ones", "[spin]") {
  AdaptiveSpin spin{microseconds(50)};
  CHECK(spin.budget() == microseconds(50));  // nothing known yet: spin
  record_many(spin, microseconds(120));
  CHECK(spin.budget() == microseconds(50));  // below 4 full spins: still the full budget, never more
  record_many(spin, microseconds(500));
  CHECK(spin.budget() == microseconds(0));   // a late peer: sleep at once
  record_many(spin, microseconds(5), 40);
  CHECK(spin.budget() == microseconds(50));  // short waits again bring the spin back
}

TEST_CASE("a spin that may stretch covers twice the typical wait, up to its longest", "[spin]") {
  AdaptiveSpin spin{microseconds(20), microseconds(200)};
  record_many(spin, microseconds(3));
  CHECK(spin.budget() == microseconds(20));  // never below the full budget
  record_many(spin, microseconds(30));
  // Two ranks asleep in turn wait about a wake-up each (30 us): a 20 us spin would never catch the next signal.
  CHECK(spin.budget().count() >= 59);
  CHECK(spin.budget().count() <= 60);
  record_many(spin, microseconds(150));
  CHECK(spin.budget() == microseconds(200));  // capped
  record_many(spin, microseconds(2000));       // a late peer (counted as 1 ms)
  CHECK(spin.budget() == microseconds(0));
}
