#pragma once
// Checks shared by the multi-process test workers: each prints what went wrong and counts it; the worker's
// exit code says whether the count stayed at zero.
#include <cmath>
#include <cstdio>
#include <string>

#include "hiercoll/errors.hpp"
#include "values.hpp"

namespace hiercoll::test {

inline int& failure_count() {
  static int count = 0;
  return count;
}

/// `ok`, or a failure saying `what` went wrong.
inline void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::printf("FAIL: %s\n", what.c_str());
  ++failure_count();
}

/// Element i of `got` equals the reference `want` (up to the tolerance of averages of 16-bit floats).
inline void expect_equal(const std::string& what, DataType type, ReduceOp op, const void* got, size_t i,
                         double want) {
  double value = get(type, got, i);
  bool ok = value == want || std::fabs(value - want) <= tolerance(type, op, want);
  if (!ok && ++failure_count() <= 10) {
    std::printf("MISMATCH %s element %zu: got %.17g want %.17g\n", what.c_str(), i, value, want);
  }
}

/// `fn` throws InvalidUsageError with `needle` in its message.
template <typename Fn>
void expect_invalid(const std::string& what, const std::string& needle, Fn fn) {
  try {
    fn();
    std::printf("FAIL %s: no error\n", what.c_str());
    ++failure_count();
  } catch (const InvalidUsageError& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      std::printf("FAIL %s: message '%s' lacks '%s'\n", what.c_str(), e.what(), needle.c_str());
      ++failure_count();
    }
  }
}

}  // namespace hiercoll::test
