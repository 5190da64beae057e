// allreduce_perf: nccl-tests-style allreduce benchmark over the hiercoll C++ API.
// Launch with hiercoll_launch, mpirun or torchrun; rank 0 prints one row per size:
//   size(B) count type redop | out-of-place time(us) algbw busbw #wrong | in-place time algbw busbw #wrong
// algbw = bytes / time; busbw = algbw * 2(n-1)/n (what to compare with the bottleneck link).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hiercoll/hiercoll.hpp"

using namespace hiercoll;

namespace {

struct Args {
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, check = 1;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

size_t parse_size(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (*end) {
    case 'K': case 'k': value *= 1024; break;
    case 'M': case 'm': value *= 1024 * 1024; break;
    case 'G': case 'g': value *= 1024.0 * 1024 * 1024; break;
  }
  return static_cast<size_t>(value);
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "-b") args.min_bytes = parse_size(value);
    else if (flag == "-e") args.max_bytes = parse_size(value);
    else if (flag == "-f") args.factor = std::atof(value);
    else if (flag == "-n") args.iters = std::atoi(value);
    else if (flag == "-w") args.warmup = std::atoi(value);
    else if (flag == "-c") args.check = std::atoi(value);
    else if (flag == "-d") {
      std::string d = value;
      if (d == "float") args.type = DataType::kFloat32;
      else if (d == "double") args.type = DataType::kFloat64;
      else if (d == "int32") args.type = DataType::kInt32;
      else throw InvalidUsageError("-d " + d + ": supported here are float, double, int32");
    } else if (flag == "-o") {
      std::string o = value;
      if (o == "sum") args.op = ReduceOp::kSum;
      else if (o == "max") args.op = ReduceOp::kMax;
      else if (o == "min") args.op = ReduceOp::kMin;
      else throw InvalidUsageError("-o " + o + ": supported here are sum, min, max");
    } else {
      throw InvalidUsageError("unknown flag " + flag + " (flags: -b -e -f -n -w -c -d -o)");
    }
  }
  if (args.factor <= 1) throw InvalidUsageError("-f must be > 1");
  return args;
}

// Fills so that sum/min/max over ranks are exact integers whatever the reduction order.
void fill(std::vector<uint8_t>& buffer, DataType type, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) {
    int v = static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 13) - 6;
    if (type == DataType::kFloat32) reinterpret_cast<float*>(buffer.data())[i] = static_cast<float>(v);
    else if (type == DataType::kFloat64) reinterpret_cast<double*>(buffer.data())[i] = v;
    else reinterpret_cast<int32_t*>(buffer.data())[i] = v;
  }
}

double expected(size_t i, int n, ReduceOp op) {
  double acc = op == ReduceOp::kSum ? 0 : op == ReduceOp::kMax ? -1e9 : 1e9;
  for (int r = 0; r < n; ++r) {
    double v = static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(r) * 3) % 13) - 6);
    acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

double value_at(const std::vector<uint8_t>& buffer, DataType type, size_t i) {
  if (type == DataType::kFloat32) return reinterpret_cast<const float*>(buffer.data())[i];
  if (type == DataType::kFloat64) return reinterpret_cast<const double*>(buffer.data())[i];
  return reinterpret_cast<const int32_t*>(buffer.data())[i];
}

// Mean over ranks, as nccl-tests' default -a 1.
double average_over_ranks(Communicator& comm, double value) {
  double sum = 0;
  comm.allreduce(&value, &sum, 1, DataType::kFloat64, ReduceOp::kSum).wait();
  return sum / comm.size();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse(argc, argv);
    Communicator comm = Communicator::from_env();
    const int n = comm.size();
    const size_t elem = dtype_size(args.type);
    if (comm.rank() == 0) {
      std::printf("# hiercoll %s allreduce_perf: %d ranks, %s %s, iters %d warmup %d\n", version(), n,
                  to_string(args.type), to_string(args.op), args.iters, args.warmup);
      std::printf("#%11s %12s %8s %6s %7s   %9s %9s %9s %6s   %9s %9s %9s %6s\n", "size(B)", "count", "type", "redop",
                  "algo", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong");
    }
    double busbw_total = 0;
    int rows = 0;
    long wrong_total = 0;
    for (size_t bytes = args.min_bytes; bytes <= args.max_bytes;
         bytes = std::max(bytes + elem, static_cast<size_t>(static_cast<double>(bytes) * args.factor))) {
      size_t count = bytes / elem;
      std::vector<uint8_t> in(count * elem + elem), out(count * elem + elem);
      fill(in, args.type, count, comm.rank());
      double times[2];
      long wrongs[2];
      for (int in_place = 0; in_place < 2; ++in_place) {
        void* target = in_place ? in.data() : out.data();
        for (int i = 0; i < args.warmup; ++i) comm.allreduce(in.data(), target, count, args.type, args.op).wait();
        comm.barrier().wait();
        auto start = std::chrono::steady_clock::now();
        Work last;
        for (int i = 0; i < args.iters; ++i) last = comm.allreduce(in.data(), target, count, args.type, args.op);
        last.wait();
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        times[in_place] = average_over_ranks(comm, seconds / args.iters);
        long wrong = 0;
        if (args.check) {  // fresh inputs, one more call, exact comparison
          fill(in, args.type, count, comm.rank());
          comm.allreduce(in.data(), target, count, args.type, args.op).wait();
          const auto& result = in_place ? in : out;
          for (size_t i = 0; i < count; ++i) wrong += value_at(result, args.type, i) != expected(i, n, args.op);
          fill(in, args.type, count, comm.rank());
        }
        double total = 0, mine = static_cast<double>(wrong);
        comm.allreduce(&mine, &total, 1, DataType::kFloat64, ReduceOp::kSum).wait();
        wrongs[in_place] = static_cast<long>(total);
      }
      if (comm.rank() == 0) {
        double algbw[2], busbw[2];
        for (int k = 0; k < 2; ++k) {
          algbw[k] = static_cast<double>(count * elem) / times[k] / 1e9;
          busbw[k] = algbw[k] * 2.0 * (n - 1) / n;
        }
        std::printf("%12zu %12zu %8s %6s %7s   %9.1f %9.3f %9.3f %6ld   %9.1f %9.3f %9.3f %6ld\n", count * elem, count,
                    to_string(args.type), to_string(args.op), comm.allreduce_algorithm(count * elem).c_str(),
                    times[0] * 1e6, algbw[0], busbw[0], wrongs[0], times[1] * 1e6, algbw[1], busbw[1], wrongs[1]);
        std::fflush(stdout);
        busbw_total += busbw[0] + busbw[1];
        rows += 2;
      }
      wrong_total += wrongs[0] + wrongs[1];
    }
    if (comm.rank() == 0) {
      std::printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %.4f\n", rows ? busbw_total / rows : 0.0);
    }
    return wrong_total ? 1 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "allreduce_perf: %s\n", e.what());
    return 1;
  }
}
