// nccl-tests-style benchmark, one binary per collective (allreduce_perf, reduce_scatter_perf,
// allgather_perf, broadcast_perf), any backend through the same harness:
//   allreduce_perf [--backend hiercoll|mpi|gloo|nccl] -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP -c CHECK
//                  -o sum|prod|min|max -d float|double|int32 -r ROOT -B 0|1 -L MS -p 0|1
// Rank 0 prints per size: size(B) count type redop root algo | out-of-place time(us) algbw busbw #wrong |
// in-place (same). size is the whole buffer (all ranks' parts for reduce_scatter / allgather);
// algbw = size / time; busbw = algbw x factor: allreduce 2(n-1)/n, reduce_scatter and allgather (n-1)/n,
// broadcast 1. Times are per iteration, averaged over ranks; checks use fresh inputs whose exact result
// does not depend on the reduction order, so #wrong must be 0. -B 1 times blocking calls (each waited for before the
// next is issued: what a caller that needs the result pays), not back-to-back issues drained at the end.
// -L MS measures what waiting costs instead: rank 0 sleeps MS milliseconds before each call, and the other ranks,
// waiting for it inside the collective, report the CPU time their processes used per second of that waiting (all
// threads: callers, progress threads, the library's helpers), beside the CPU one call costs when nobody is late.
// -p 1 times each call (blocking, as -B 1) and prints, under each row, rank 0's median, 99th percentile and longest
// out-of-place call, and how many took over 1 ms.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/version.hpp"

using namespace hiercoll;
using hiercoll::bench::Backend;

namespace {

enum class Collective { kAllreduce, kReduceScatter, kAllgather, kBroadcast };
constexpr Collective kCollective = static_cast<Collective>(HIERCOLL_COLLECTIVE);

const char* collective_name() {
  switch (kCollective) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllgather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
  }
  return "?";
}

struct Args {
  std::string backend = "hiercoll";
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, root = 0;
  bool blocking = false, spread = false;
  int late_ms = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

size_t parse_size(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) throw InvalidUsageError("'" + text + "' is not a size");
  switch (*end) {
    case 'K':
    case 'k': value *= 1024; break;
    case 'M':
    case 'm': value *= 1024 * 1024; break;
    case 'G':
    case 'g': value *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(value);
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (i + 1 >= argc) throw InvalidUsageError(flag + " needs a value");
    std::string value = argv[i + 1];
    if (flag == "--backend") args.backend = value;
    else if (flag == "-b") args.min_bytes = parse_size(value);
    else if (flag == "-e") args.max_bytes = parse_size(value);
    else if (flag == "-f") args.factor = std::atof(value.c_str());
    else if (flag == "-n") args.iters = std::atoi(value.c_str());
    else if (flag == "-w") args.warmup = std::atoi(value.c_str());
    else if (flag == "-c") args.check = std::atoi(value.c_str());
    else if (flag == "-r") args.root = std::atoi(value.c_str());
    else if (flag == "-B") args.blocking = std::atoi(value.c_str()) != 0;
    else if (flag == "-L") args.late_ms = std::atoi(value.c_str());
    else if (flag == "-p") args.spread = std::atoi(value.c_str()) != 0;
    else if (flag == "-d") {
      if (value == "float") args.type = DataType::kFloat32;
      else if (value == "double") args.type = DataType::kFloat64;
      else if (value == "int32") args.type = DataType::kInt32;
      else throw InvalidUsageError("-d " + value + ": supported are float, double, int32");
    } else if (flag == "-o") {
      if (value == "sum") args.op = ReduceOp::kSum;
      else if (value == "prod") args.op = ReduceOp::kProd;
      else if (value == "min") args.op = ReduceOp::kMin;
      else if (value == "max") args.op = ReduceOp::kMax;
      else throw InvalidUsageError("-o " + value + ": supported are sum, prod, min, max");
    } else {
      throw InvalidUsageError("unknown flag " + flag + " (flags: --backend -b -e -f -n -w -c -o -d -r -B -L -p)");
    }
  }
  if (args.factor <= 1) throw InvalidUsageError("-f must be > 1");
  if (args.iters < 1) throw InvalidUsageError("-n must be >= 1");
  return args;
}

// Inputs whose reductions are exact small integers in every type, whatever the order.
double input(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) return (i + static_cast<size_t>(rank)) % 5 == 0 ? 2.0 : 1.0;
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 13) - 6);
}

double reduced(int n, size_t i, ReduceOp op) {
  double acc = input(0, i, op);
  for (int r = 1; r < n; ++r) {
    double v = input(r, i, op);
    acc = op == ReduceOp::kSum    ? acc + v
          : op == ReduceOp::kProd ? acc * v
          : op == ReduceOp::kMax  ? std::max(acc, v)
                                  : std::min(acc, v);
  }
  return acc;
}

void put(std::vector<uint8_t>& host, DataType type, size_t i, double v) {
  if (type == DataType::kFloat32) reinterpret_cast<float*>(host.data())[i] = static_cast<float>(v);
  else if (type == DataType::kFloat64) reinterpret_cast<double*>(host.data())[i] = v;
  else reinterpret_cast<int32_t*>(host.data())[i] = static_cast<int32_t>(v);
}

double get(const std::vector<uint8_t>& host, DataType type, size_t i) {
  if (type == DataType::kFloat32) return reinterpret_cast<const float*>(host.data())[i];
  if (type == DataType::kFloat64) return reinterpret_cast<const double*>(host.data())[i];
  return reinterpret_cast<const int32_t*>(host.data())[i];
}

struct Shape {
  size_t in_count, out_count;  // elements per rank
  size_t total_count;          // elements of the whole operation (what `size` reports)
  double bus_factor;
};

Shape shape_for(size_t count, int n) {
  switch (kCollective) {
    case Collective::kAllreduce: return {count, count, count, 2.0 * (n - 1) / n};
    case Collective::kReduceScatter: {
      size_t part = count / static_cast<size_t>(n);
      return {part * n, part, part * n, static_cast<double>(n - 1) / n};
    }
    case Collective::kAllgather: {
      size_t part = count / static_cast<size_t>(n);
      return {part, part * n, part * n, static_cast<double>(n - 1) / n};
    }
    case Collective::kBroadcast: return {count, count, count, 1.0};
  }
  return {};
}

class Runner {
 public:
  Runner(Backend& backend, const Args& args) : b_(backend), args_(args), n_(backend.size()), r_(backend.rank()) {}

  void fill(void* in, const Shape& s) {
    std::vector<uint8_t> host(s.in_count * dtype_size(args_.type) + 8);
    size_t first = kCollective == Collective::kAllgather ? 0 : 0;
    for (size_t i = 0; i < s.in_count; ++i) put(host, args_.type, i, input(r_, first + i, args_.op));
    b_.upload(in, host.data(), s.in_count * dtype_size(args_.type));
  }

  // One issue of the collective. In place: out doubles as in (at this rank's part where the layout asks).
  void issue(void* in, void* out, const Shape& s, bool in_place) {
    const size_t elem = dtype_size(args_.type);
    switch (kCollective) {
      case Collective::kAllreduce: b_.allreduce(in_place ? out : in, out, s.out_count, args_.type, args_.op); break;
      case Collective::kReduceScatter:
        b_.reduce_scatter(in, in_place ? static_cast<uint8_t*>(in) + r_ * s.out_count * elem : out, s.out_count,
                          args_.type, args_.op);
        break;
      case Collective::kAllgather:
        b_.allgather(in_place ? static_cast<uint8_t*>(out) + r_ * s.in_count * elem : in, out, s.in_count, args_.type);
        break;
      case Collective::kBroadcast: b_.broadcast(in_place ? in : out, s.in_count, args_.type, args_.root); break;
    }
  }

  long check(void* in, void* out, const Shape& s, bool in_place) {
    const size_t elem = dtype_size(args_.type);
    fill(in, s);
    void* result = out;
    if (kCollective == Collective::kBroadcast) {
      if (r_ != args_.root) {  // non-roots start from garbage
        std::vector<uint8_t> junk(s.in_count * elem, 0x5a);
        b_.upload(in_place ? in : out, junk.data(), junk.size());
      } else if (!in_place) {
        std::vector<uint8_t> host(s.in_count * elem);
        b_.download(host.data(), in, host.size());
        b_.upload(out, host.data(), host.size());
      }
      result = in_place ? in : out;
    } else if (in_place && kCollective == Collective::kAllreduce) {
      std::vector<uint8_t> host(s.in_count * elem);
      b_.download(host.data(), in, host.size());
      b_.upload(out, host.data(), host.size());
    } else if (in_place && kCollective == Collective::kAllgather) {
      std::vector<uint8_t> host(s.in_count * elem);
      b_.download(host.data(), in, host.size());
      b_.upload(static_cast<uint8_t*>(out) + r_ * s.in_count * elem, host.data(), host.size());
    } else if (in_place && kCollective == Collective::kReduceScatter) {
      result = static_cast<uint8_t*>(in) + r_ * s.out_count * elem;
    }
    issue(in, out, s, in_place);
    b_.sync();
    std::vector<uint8_t> host(s.out_count * elem + 8);
    b_.download(host.data(), result, s.out_count * elem);
    long wrong = 0;
    for (size_t i = 0; i < s.out_count; ++i) {
      double want = 0;
      switch (kCollective) {
        case Collective::kAllreduce: want = reduced(n_, i, args_.op); break;
        case Collective::kReduceScatter: want = reduced(n_, r_ * s.out_count + i, args_.op); break;
        case Collective::kAllgather: want = input(static_cast<int>(i / s.in_count), i % s.in_count, args_.op); break;
        case Collective::kBroadcast: want = input(args_.root, i, args_.op); break;
      }
      wrong += get(host, args_.type, i) != want;
    }
    return wrong;
  }

  // Mean over ranks (nccl-tests -a 1), through the backend itself.
  double average(double value) {
    void* buffer = b_.allocate(sizeof(double));
    b_.upload(buffer, &value, sizeof(double));
    b_.allreduce(buffer, buffer, 1, DataType::kFloat64, ReduceOp::kSum);
    b_.sync();
    double sum = 0;
    b_.download(&sum, buffer, sizeof(double));
    b_.release(buffer);
    return sum / n_;
  }

  // Every size from -b to -e (-f apart): its shape and this rank's buffers, the input filled, released after `body`.
  template <class Body>
  void for_each_size(Body body) {
    const size_t elem = dtype_size(args_.type);
    for (size_t bytes = args_.min_bytes; bytes <= args_.max_bytes;
         bytes = std::max(bytes + elem, static_cast<size_t>(static_cast<double>(bytes) * args_.factor))) {
      Shape s = shape_for(bytes / elem, n_);
      if (s.total_count == 0) continue;
      void* in = b_.allocate(std::max(s.in_count, s.out_count) * elem);
      void* out = b_.allocate(std::max(s.in_count, s.out_count) * elem);
      fill(in, s);
      body(s, in, out);
      b_.release(in);
      b_.release(out);
    }
  }

  // -iters calls after -warmup ones, the ranks lined up first; each waited for when `blocking`, rank 0 (every rank
  // when `everyone`) sleeping `late_ms` before each. This process's CPU and wall time over the timed calls.
  struct Usage {
    double cpu, wall;  // seconds
  };
  Usage timed_calls(void* in, void* out, const Shape& s, bool in_place, bool blocking, int late_ms,
                    bool everyone = false) {
    blocking = blocking || args_.spread;  // each call's own time is the time to its end
    for (int i = 0; i < args_.warmup; ++i) issue(in, out, s, in_place);
    b_.sync();
    average(0);  // line the ranks up before timing
    timespec cpu0{}, cpu1{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
    const auto start = std::chrono::steady_clock::now();
    per_call_.clear();
    for (int i = 0; i < args_.iters; ++i) {
      if ((r_ == 0 || everyone) && late_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
      const auto call_start = args_.spread ? std::chrono::steady_clock::now() : start;
      issue(in, out, s, in_place);
      if (blocking) b_.sync();
      if (args_.spread) per_call_.push_back(std::chrono::steady_clock::now() - call_start);
    }
    b_.sync();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    return {(cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) * 1e-9,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  }

  // -L: CPU-seconds per second that the ranks waiting for a late rank 0 spend, per size. Each size runs three times:
  // with rank 0 on time (what the operation itself costs in CPU, and the wall time with no one waiting), with every
  // rank idle for the same time before each call, and with rank 0 alone late. The waiting cost is the CPU time of the
  // late run less the idle run's, over the late run's wall time less the on-time run's: the call's own work is not
  // counted as waiting, nor is what it costs more after an idle spell (on this machine a 4 MB copy takes twice the
  // CPU after 100 ms of sleep: its caches went cold), which a late call pays whatever the waiting cost.
  int run_late() {
    const size_t elem = dtype_size(args_.type);
    if (n_ < 2) throw InvalidUsageError("-L needs at least 2 ranks");
    if (r_ == 0) {
      std::printf("# hiercoll %s %s_perf -L %d, backend %s: %d ranks; rank 0 sleeps %d ms before each of %d calls\n",
                  version(), collective_name(), args_.late_ms, b_.name().c_str(), n_, args_.late_ms, args_.iters);
      std::printf("# waiting ranks (mean): CPU per call with rank 0 on time, and CPU-seconds per second of waiting\n");
      std::printf("#%11s %12s %14s %18s\n", "size(B)", "count", "op CPU(ms)", "wait CPU-s/s");
    }
    for_each_size([&](const Shape& s, void* in, void* out) {
      const Usage on_time = timed_calls(in, out, s, false, true, 0);
      const Usage idle = timed_calls(in, out, s, false, true, args_.late_ms, true);
      const Usage late = timed_calls(in, out, s, false, true, args_.late_ms);
      const double op_ms = on_time.cpu / args_.iters * 1e3;
      const double waiting = (late.cpu - idle.cpu) / std::max(1e-9, late.wall - on_time.wall);
      // Means over the waiting ranks (rank 0 contributes nothing to the sums).
      const double scale = static_cast<double>(n_) / (n_ - 1);
      const double op_mean = average(r_ == 0 ? 0.0 : op_ms) * scale, wait_mean = average(r_ == 0 ? 0.0 : waiting) * scale;
      if (r_ == 0) {
        std::printf("%12zu %12zu %14.3f %18.4f\n", s.total_count * elem, s.total_count, op_mean, wait_mean);
        std::fflush(stdout);
      }
    });
    return 0;
  }

  int run() {
    if (args_.late_ms > 0) return run_late();
    const size_t elem = dtype_size(args_.type);
    if (r_ == 0) {
      std::printf("# hiercoll %s %s_perf, backend %s: %d ranks, %s %s, iters %d warmup %d\n", version(),
                  collective_name(), b_.name().c_str(), n_, to_string(args_.type), to_string(args_.op), args_.iters,
                  args_.warmup);
      std::printf("#%11s %12s %8s %6s %4s %6s   %9s %9s %9s %6s   %9s %9s %9s %6s\n", "size(B)", "count", "type",
                  "redop", "root", "algo", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw",
                  "#wrong");
    }
    double busbw_sum = 0;
    long wrong_total = 0;
    int rows = 0;
    for_each_size([&](const Shape& s, void* in, void* out) {
      double seconds[2];
      long wrong[2] = {0, 0};
      std::string spread;
      for (int in_place = 0; in_place < 2; ++in_place) {
        seconds[in_place] = average(timed_calls(in, out, s, in_place, args_.blocking, 0).wall / args_.iters);
        if (args_.spread && in_place == 0) spread = spread_line();
        for (int c = 0; c < args_.check; ++c) wrong[in_place] += check(in, out, s, in_place);
        wrong[in_place] = static_cast<long>(average(static_cast<double>(wrong[in_place])) * n_ + 0.5);
        fill(in, s);
      }
      if (r_ == 0) {
        double total = static_cast<double>(s.total_count * elem);
        std::printf("%12zu %12zu %8s %6s %4d %6s", s.total_count * elem, s.total_count, to_string(args_.type),
                    to_string(args_.op), kCollective == Collective::kBroadcast ? args_.root : -1,
                    kCollective == Collective::kAllreduce ? b_.algorithm(s.total_count * elem).c_str() : "-");
        for (int k = 0; k < 2; ++k) {
          double algbw = total / seconds[k] / 1e9, busbw = algbw * s.bus_factor;
          // Below 10 us in hundredths: a small call's differences are tenths.
          std::printf(seconds[k] < 1e-5 ? "   %9.2f %9.3f %9.3f %6ld" : "   %9.1f %9.3f %9.3f %6ld", seconds[k] * 1e6,
                      algbw, busbw, wrong[k]);
          busbw_sum += busbw;
          ++rows;
        }
        std::printf("\n%s", spread.c_str());
        std::fflush(stdout);
      }
      wrong_total += wrong[0] + wrong[1];
    });
    if (r_ == 0) {
      std::printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %.4f\n", rows ? busbw_sum / rows : 0.0);
    }
    return wrong_total ? 1 : 0;
  }

 private:
  // -p: rank 0's out-of-place calls of this size one by one, as a comment line under the row. A mean hides the few
  // calls that lost the core for a scheduler slice (milliseconds) among hundreds of microsecond ones.
  std::string spread_line() {
    std::vector<double> us;
    for (auto d : per_call_) us.push_back(std::chrono::duration<double, std::micro>(d).count());
    std::sort(us.begin(), us.end());
    const auto slow = std::count_if(us.begin(), us.end(), [](double t) { return t > 1000; });
    char line[200];
    std::snprintf(line, sizeof(line),
                  "#   rank %d, each call waited for (us): median %.2f, 99th percentile %.2f, max %.1f; "
                  "%ld of %zu over 1 ms\n",
                  r_, us[us.size() / 2], us[us.size() * 99 / 100], us.back(), static_cast<long>(slow), us.size());
    return line;
  }

  Backend& b_;
  const Args& args_;
  int n_, r_;
  std::vector<std::chrono::steady_clock::duration> per_call_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    // The backend first: MPI_Init may consume arguments of its own.
    std::string backend_name = "hiercoll";
    for (int i = 1; i + 1 < argc; ++i) {
      if (std::string(argv[i]) == "--backend") backend_name = argv[i + 1];
    }
    auto backend = hiercoll::bench::make_backend(backend_name, &argc, &argv);
    Args args = parse(argc, argv);
    if (args.root < 0 || args.root >= backend->size())
      throw InvalidUsageError("-r: no rank " + std::to_string(args.root));
    return Runner(*backend, args).run();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s_perf: %s\n", collective_name(), e.what());
    return 1;
  }
}
