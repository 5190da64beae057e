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

TEST_CASE("integers and byte counts out of range are refused, not wrapped or narrowed", "[env]") {
  setenv("HIERCOLL_TEST_KNOB", "99999999999999999999", 1);
  CHECK_THROWS_WITH(base::env_int("HIERCOLL_TEST_KNOB", 7), Catch::Contains("out of range"));
  setenv("HIERCOLL_TEST_KNOB", "4294967296", 1);  // an int64 that an int would wrap to 0
  CHECK(base::env_int("HIERCOLL_TEST_KNOB", 7) == 4294967296);
  CHECK_THROWS_WITH(base::env_int_in("HIERCOLL_TEST_KNOB", 7, 0, 2147483647),
                    Catch::Contains("HIERCOLL_TEST_KNOB=4294967296 is out of range (0 to 2147483647)"));
  setenv("HIERCOLL_TEST_KNOB", "-1", 1);
  CHECK_THROWS_AS(base::env_int_in("HIERCOLL_TEST_KNOB", 7, 0, 10), InvalidUsageError);
  unsetenv("HIERCOLL_TEST_KNOB");
  CHECK(base::env_int_in("HIERCOLL_TEST_KNOB", 7, 0, 10) == 7);
  CHECK_THROWS_WITH(base::parse_bytes("17179869184G", "X"), Catch::Contains("out of range"));  // 2^64 bytes
  CHECK_THROWS_WITH(base::parse_bytes("99999999999999999999", "X"), Catch::Contains("out of range"));
  CHECK(base::parse_bytes("17179869183G", "X") == 17179869183ull << 30);
}
