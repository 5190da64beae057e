#include "base/env.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "hiercoll/errors.hpp"

using namespace hiercoll;

TEST_CASE("byte counts parse with K/M/G suffixes and reject junk", "[env]") {
  CHECK(base::parse_bytes("512", "X") == 512);
  CHECK(base::parse_bytes("64K", "X") == 64u << 10);
  CHECK(base::parse_bytes("3M", "X") == 3u << 20);
  CHECK(base::parse_bytes("2G", "X") == 2ull << 30);
  CHECK_THROWS_AS(base::parse_bytes("12Q", "X"), InvalidUsageError);
  CHECK_THROWS_WITH(base::parse_bytes("abc", "HIERCOLL_CHUNK_BYTES"), Catch::Contains("HIERCOLL_CHUNK_BYTES"));
  CHECK_THROWS_AS(base::parse_bytes("-5", "X"), InvalidUsageError);
}

TEST_CASE("integer knobs fall back when unset and name themselves when malformed", "[env]") {
  unsetenv("HIERCOLL_TEST_KNOB");
  CHECK(base::env_int("HIERCOLL_TEST_KNOB", 7) == 7);
  setenv("HIERCOLL_TEST_KNOB", "12", 1);
  CHECK(base::env_int("HIERCOLL_TEST_KNOB", 7) == 12);
  setenv("HIERCOLL_TEST_KNOB", "12x", 1);
  CHECK_THROWS_WITH(base::env_int("HIERCOLL_TEST_KNOB", 7), Catch::Contains("HIERCOLL_TEST_KNOB"));
  unsetenv("HIERCOLL_TEST_KNOB");
}
