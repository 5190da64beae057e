// Reduction kernels of every instruction set this CPU has, against a scalar double-precision reference
// built with the test's own encoder, over odd counts and unaligned offsets.
#include "reduce/reduce.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "values.hpp"

using namespace hiercoll;
using hiercoll::reduce::Isa;

namespace {

double apply(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
    default: return a + b;
  }
}

// Random values in a range that keeps integer results from wrapping (wrap-around is tested apart).
double random_value(std::mt19937& rng, DataType type, ReduceOp op) {
  std::uniform_real_distribution<double> real(-1000, 1000);
  std::uniform_int_distribution<int> small(-11, 11), tiny(0, 11);
  switch (type) {
    case DataType::kUInt8: return op == ReduceOp::kProd ? tiny(rng) % 4 : tiny(rng);
    case DataType::kInt8: return op == ReduceOp::kProd ? small(rng) % 4 : small(rng);
    case DataType::kInt32:
    case DataType::kInt64: return small(rng) * 1000;
    default: return real(rng);
  }
}

}  // namespace

TEST_CASE("kernels match a scalar reference for every type, op and instruction set", "[reduce]") {
  // Both ways of storing: streaming goes through L1 blocks and writes the lines dst starts and ends inside apart.
  std::mt19937 rng(42);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!reduce::isa_supported(isa)) {
      WARN("SKIPPED: this CPU lacks " << reduce::to_string(isa));
      continue;
    }
    for (reduce::Stores stores : {reduce::Stores::kCached, reduce::Stores::kStreaming})
      for (DataType type : test::all_types()) {
        for (ReduceOp op : test::all_ops()) {
          for (size_t count : {size_t{1}, size_t{3}, size_t{17}, size_t{1023}, size_t{1025}, size_t{5000}}) {
            for (size_t offset : {size_t{0}, size_t{1}}) {  // offset 1 element: unaligned vector loads
              size_t elem = dtype_size(type);
              std::vector<uint8_t> a((count + offset) * elem), b(a.size()), dst(a.size());
              for (size_t i = 0; i < count; ++i) {
                test::put(type, a.data() + offset * elem, i, random_value(rng, type, op));
                test::put(type, b.data() + offset * elem, i, random_value(rng, type, op));
              }
              reduce::reduce_with(isa, dst.data() + offset * elem, a.data() + offset * elem, b.data() + offset * elem,
                                  count, type, op, stores);
              for (size_t i = 0; i < count; ++i) {
                double x = test::get(type, a.data() + offset * elem, i),
                       y = test::get(type, b.data() + offset * elem, i);
                uint8_t cell[8];
                test::put(type, cell, 0, apply(op, x, y));  // exact op in double, one rounding into the type
                double want = test::get(type, cell, 0);
                double got = test::get(type, dst.data() + offset * elem, i);
                if (got != want) {
                  FAIL(reduce::to_string(isa) << (stores == reduce::Stores::kStreaming ? " streaming " : " ")
                                              << to_string(type) << " " << to_string(op) << " count " << count << " i "
                                              << i << ": " << x << " op " << y << " = " << got << ", want " << want);
                }
              }
            }
          }
        }
      }
  }
}

TEST_CASE("16-bit kernels of every instruction set agree with the scalar ones on any bit pattern", "[reduce]") {
  // Random bits cover what the value test above avoids: NaNs, infinities, subnormals, sums that overflow to
  // infinity and products that underflow. The scalar kernels convert in software, one element at a time; the
  // others convert in vector registers. NaN payloads may differ (F16C keeps them), so NaN matches any NaN.
  std::mt19937 rng(16);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    auto to_float = type == DataType::kFloat16 ? reduce::half_to_float : reduce::bf16_to_float;
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (!reduce::isa_supported(isa)) continue;
      for (ReduceOp op : test::all_ops()) {
        // Counts on both sides of the vector kernels' steps (8 and 16 elements a turn) and with scalar tails.
        for (size_t count :
             {size_t{5}, size_t{8}, size_t{16}, size_t{23}, size_t{32}, size_t{63}, size_t{127}, size_t{4099}}) {
          std::vector<uint16_t> a(count), b(count), want(count), got(count);
          for (size_t i = 0; i < count; ++i) {
            a[i] = static_cast<uint16_t>(bits(rng));
            b[i] = static_cast<uint16_t>(bits(rng));
          }
          reduce::reduce_with(Isa::kScalar, want.data(), a.data(), b.data(), count, type, op);
          reduce::reduce_with(isa, got.data(), a.data(), b.data(), count, type, op);
          for (size_t i = 0; i < count; ++i) {
            const bool both_nan = std::isnan(to_float(want[i])) && std::isnan(to_float(got[i]));
            if (got[i] != want[i] && !both_nan) {
              FAIL(reduce::to_string(isa)
                   << " " << to_string(type) << " " << to_string(op) << " count " << count << " i " << i << ": "
                   << std::hex << a[i] << " op " << b[i] << " = " << got[i] << ", the scalar kernel gives " << want[i]);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("kernels work in place on either operand", "[reduce]") {
  std::vector<float> a(999), b(999);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * static_cast<float>(i);
  }
  const std::vector<float> a0 = a, b0 = b;
  for (reduce::Stores stores : {reduce::Stores::kCached, reduce::Stores::kStreaming}) {
    a = a0;
    b = b0;
    const Isa isa = reduce::active_isa();
    reduce::reduce_with(isa, a.data(), a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kSum, stores);
    reduce::reduce_with(isa, b.data(), a0.data(), b.data(), b.size(), DataType::kFloat32, ReduceOp::kMax, stores);
    for (size_t i = 0; i < a.size(); ++i) {
      REQUIRE(a[i] == 3.0f * static_cast<float>(i));
      REQUIRE(b[i] == 2.0f * static_cast<float>(i));
    }
  }
}

TEST_CASE("integer sums and products wrap around like NCCL", "[reduce]") {
  int8_t a[3] = {127, -128, 100}, b[3] = {1, -1, 100}, out[3];
  reduce::reduce(out, a, b, 3, DataType::kInt8, ReduceOp::kSum);
  CHECK(out[0] == -128);
  CHECK(out[1] == 127);
  CHECK(out[2] == static_cast<int8_t>(200 - 256));
  int32_t big[1] = {1 << 30}, two[1] = {4}, product[1];
  reduce::reduce(product, big, two, 1, DataType::kInt32, ReduceOp::kProd);
  CHECK(product[0] == 0);
}

TEST_CASE("divide finishes averages and refuses integers", "[reduce]") {
  std::vector<uint16_t> h = {reduce::float_to_half(3.0f), reduce::float_to_half(-9.0f)};
  reduce::divide(h.data(), h.size(), DataType::kFloat16, 3);
  CHECK(reduce::half_to_float(h[0]) == 1.0f);
  CHECK(reduce::half_to_float(h[1]) == -3.0f);
  int32_t i[1] = {9};
  CHECK_THROWS_WITH(reduce::divide(i, 1, DataType::kInt32, 3), Catch::Contains("not defined on int32"));
}

TEST_CASE("fp16 and bf16 conversions round to nearest even, as the test encoder does", "[reduce]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    double d = f;
    REQUIRE(reduce::float_to_half(f) == test::encode_small_float(d, 10, 5));
    REQUIRE(reduce::float_to_bf16(f) == test::encode_small_float(d, 7, 8));
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    double want = test::decode_small_float(static_cast<uint16_t>(h), 10, 5);
    double got = reduce::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(got == want);
    }
  }
  CHECK(std::isnan(reduce::half_to_float(reduce::float_to_half(NAN))));
  CHECK(std::isnan(reduce::bf16_to_float(reduce::float_to_bf16(NAN))));
}

TEST_CASE("reduce_sources equals the pairwise chain of kernels, with or without a copy", "[reduce]") {
  // Blocked over several sources, the result must have the bits of reducing whole buffers in source order; the second
  // destination and streaming stores change only where and how the result is stored. Counts cross the 4 KB and 16 KB
  // blocks. In place, dst or the copy is one of the sources (any one for dst: the chain reads sources after the
  // second once dst holds partial results), and each block must be read before it is written.
  std::mt19937 rng(7);
  for (DataType type :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt8, DataType::kFloat64}) {
    const size_t elem = dtype_size(type);
    for (int n : {2, 3, 5}) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{4097}, size_t{20000}}) {
        std::vector<std::vector<uint8_t>> sources(static_cast<size_t>(n), std::vector<uint8_t>(count * elem));
        for (auto& s : sources) {
          for (size_t i = 0; i < count; ++i) test::put(type, s.data(), i, random_value(rng, type, ReduceOp::kSum));
        }
        const std::vector<std::vector<uint8_t>> originals = sources;
        std::vector<const void*> pointers;
        for (auto& s : sources) pointers.push_back(s.data());
        std::vector<uint8_t> want(count * elem);
        reduce::reduce(want.data(), pointers[0], pointers[1], count, type, ReduceOp::kSum);
        for (int k = 2; k < n; ++k) reduce::reduce(want.data(), want.data(), pointers[k], count, type, ReduceOp::kSum);
        for (int dst_at : {-1, 0, 1, n - 1})    // a buffer of its own, or that source (in place)
          for (int copy_to : {-1, 0, n - 1}) {  // none, a buffer of its own, the last source (in place)
            if (copy_to == n - 1 && dst_at == n - 1) continue;
            for (reduce::Stores stores : {reduce::Stores::kCached, reduce::Stores::kStreaming}) {
              INFO(to_string(type) << " n " << n << " count " << count << " dst " << dst_at << " copy " << copy_to
                                   << " streaming " << (stores == reduce::Stores::kStreaming));
              std::vector<uint8_t> got(want.size(), 0xab), own(want.size(), 0xcd);
              void* dst = dst_at < 0 ? got.data() : sources[static_cast<size_t>(dst_at)].data();
              void* copy = copy_to < 0 ? nullptr : copy_to == 0 ? own.data() : sources.back().data();
              reduce::reduce_sources(dst, pointers.data(), n, count, type, ReduceOp::kSum, copy, stores);
              CHECK(std::memcmp(dst, want.data(), want.size()) == 0);
              if (copy != nullptr) CHECK(std::memcmp(copy, want.data(), want.size()) == 0);
              sources = originals;
              for (size_t k = 0; k < sources.size(); ++k) pointers[k] = sources[k].data();
            }
          }
      }
    }
  }
  const float x = 1;
  const void* one[] = {&x};
  float out = 0;
  CHECK_THROWS_WITH(reduce::reduce_sources(&out, one, 1, 1, DataType::kFloat32, ReduceOp::kSum),
                    Catch::Contains("1 sources"));
}

TEST_CASE("publish copies exactly, with ordinary stores and in a streaming spell", "[reduce]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (bool spell : {false, true}) {
    // Below the 4 KB from which a spell streams, at it, and past it with tails; every offset a vector store meets.
    for (size_t bytes : {size_t{100}, size_t{4096}, size_t{4099}, size_t{65536 + 3}, size_t{1} << 20}) {
      for (size_t offset : {size_t{0}, size_t{1}, size_t{63}}) {
        std::vector<uint8_t> src(bytes + offset), dst(bytes + offset + 1, 0xee);
        for (auto& b : src) b = static_cast<uint8_t>(byte(rng));
        reduce::publish_stream_spell(spell ? 1 : 0);
        reduce::publish(dst.data() + offset, src.data() + offset, bytes);
        // The spell was one copy long: spent by a copy it covered, still there after a smaller one. (Without one,
        // whether slow copies start a spell is the host's doing: under a sanitizer every copy is slow.)
        if (spell) CHECK(reduce::publish_streams() == (bytes < 4096));
        reduce::publish_stream_spell(0);
        INFO((spell ? "streaming " : "memcpy ") << bytes << " bytes at offset " << offset);
        CHECK(std::equal(src.begin() + static_cast<long>(offset), src.end(), dst.begin() + static_cast<long>(offset)));
        CHECK(dst.back() == 0xee);  // nothing past the end
        CHECK(std::all_of(dst.begin(), dst.begin() + static_cast<long>(offset), [](uint8_t b) { return b == 0xee; }));
      }
    }
  }
}
