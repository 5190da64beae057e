// Whole communicators at the seeds' scale, as threads of one process: N ranks, each a thread with its own TcpStore
// client, peer-watch connection and endpoint of the in-process fabric (provider "memory"), laid out as nodes of
// --per-node ranks (CommOptions::node), so that start-up, the store, the peer watch, the node arenas and every
// algorithm run as they do across N processes. Only the bytes between ranks move through memory instead of a NIC.
//
// For each algorithm in --algos (HIERCOLL_ALGO, set between phases while no rank thread runs) it creates the
// communicator on every rank, checks the layout, runs every collective and compares every rank's output with a
// serial reference, and destroys it. In the last phase one rank (--victim) aborts while the others wait in an
// allreduce it never joins: every other rank must fail with PeerLostError naming it within --notice-limit-ms.
// Prints one line per phase with the create time and the process's resident memory per rank; exits 1 on the first
// wrong element or missing error, naming it.
//
// CI runs 256 ranks (test/CMakeLists.txt); scripts/study/scale-threads runs 1,024 and 2,048 (docs/scaling.md).
#include <hiercoll/communicator.hpp>
#include <hiercoll/errors.hpp>
#include <hiercoll/store.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective_checks.hpp"

namespace {

using namespace hiercoll::test::scale;
using hiercoll::Communicator;
using hiercoll::DataType;
using hiercoll::ReduceOp;

struct Options {
  int ranks = 256;
  int per_node = 8;
  std::vector<std::string> algos{"auto"};
  size_t count = 4099;  // elements of the large allreduce and broadcast: not a multiple of any rank count
  int timeout_ms = 120000;
  int victim = -1;  // -1: size / 2 + 1
  int notice_limit_ms = 2000;
  int idle_ms = 1000;  // after create, every rank idles this long: the CPU the communicators cost at rest
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "hiercoll_thread_ranks: %s\nusage: hiercoll_thread_ranks [--ranks N] [--per-node P] "
               "[--algos a,b,...] [--count K] [--timeout-ms T] [--victim R] [--notice-limit-ms L] "
               "[--idle-ms I]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing the value of " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--ranks") {
      o.ranks = std::stoi(value);
    } else if (flag == "--per-node") {
      o.per_node = std::stoi(value);
    } else if (flag == "--algos") {
      o.algos.clear();
      std::stringstream list(value);
      for (std::string algo; std::getline(list, algo, ',');) o.algos.push_back(algo);
    } else if (flag == "--count") {
      o.count = std::stoul(value);
    } else if (flag == "--timeout-ms") {
      o.timeout_ms = std::stoi(value);
    } else if (flag == "--victim") {
      o.victim = std::stoi(value);
    } else if (flag == "--idle-ms") {
      o.idle_ms = std::stoi(value);
    } else if (flag == "--notice-limit-ms") {
      o.notice_limit_ms = std::stoi(value);
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.ranks < 2 || o.per_node < 1 || o.ranks % o.per_node != 0) usage("--ranks must be >= 2 and a multiple of --per-node");
  if (o.algos.empty()) usage("--algos is empty");
  if (o.victim < 0) o.victim = o.ranks / 2 + 1;
  if (o.victim >= o.ranks) usage("--victim is outside the ranks");
  return o;
}

// Process memory from /proc/self/status, in kB: resident anonymous, file-backed and shared (RssAnon, RssFile,
// RssShmem).
struct Memory {
  long anon = 0, file = 0, shmem = 0;
};
Memory memory_now() {
  Memory m;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    long* field = line.rfind("RssAnon:", 0) == 0 ? &m.anon
                  : line.rfind("RssFile:", 0) == 0 ? &m.file
                  : line.rfind("RssShmem:", 0) == 0 ? &m.shmem
                                                     : nullptr;
    if (field) *field = std::atol(line.c_str() + line.find(':') + 1);
  }
  return m;
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// One phase: every rank creates its communicator, idles, runs body(comm), destroys it. The times are the slowest
// rank's; "rest" is the phase's wall time less those and the idle time: mostly destruction.
struct PhaseTimes {
  double create_ms = 0, work_ms = 0, destroy_ms = 0;
  Memory memory;  // the process's, with every communicator made
  double idle_cpu_per_s = -1;  // the process's CPU seconds per second while every rank is idle
};

template <typename Body>
PhaseTimes run_phase(const Options& o, uint16_t port, Verdict& verdict, Body body) {
  const int n = o.ranks;
  std::vector<std::thread> threads;
  int created = 0;  // ranks past create (or failed), under arrival_mutex, as are the two below
  Clock::time_point idle_from;
  double idle_cpu = 0;
  std::mutex arrival_mutex;
  std::condition_variable arrived;
  std::vector<double> create_ms(static_cast<size_t>(n)), work_ms(static_cast<size_t>(n));
  PhaseTimes times;
  const auto start = Clock::now();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      bool counted = false;
      try {
        auto store = std::make_shared<hiercoll::TcpStore>("127.0.0.1", port, false,
                                                          std::chrono::milliseconds(o.timeout_ms));
        hiercoll::CommOptions options;
        options.provider = "memory";
        options.node = "node" + std::to_string(r / o.per_node);
        options.timeout = std::chrono::milliseconds(o.timeout_ms);
        const auto t0 = Clock::now();
        Communicator comm = Communicator::create(store, r, n, options);
        create_ms[static_cast<size_t>(r)] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        const auto& layout = comm.layout();
        if (layout.node_count != n / o.per_node || layout.local_size != o.per_node ||
            layout.node != r / o.per_node || layout.local_rank != r % o.per_node) {
          verdict.fail("rank " + std::to_string(r) + "'s layout is " + layout.describe());
        }
        // The last rank to arrive reads the memory with every communicator made, then lets the others go on.
        {
          std::unique_lock<std::mutex> lock(arrival_mutex);
          counted = true;
          if (++created == n) {
            times.memory = memory_now();
            idle_from = Clock::now();
            idle_cpu = cpu_seconds();
            arrived.notify_all();
          }
          arrived.wait(lock, [&] { return created == n; });
          // Every rank idle for a while: what the communicators' own threads (peer watch, progress) cost then.
          arrived.wait_until(lock, idle_from + std::chrono::milliseconds(o.idle_ms), [] { return false; });
          if (times.idle_cpu_per_s < 0) {
            times.idle_cpu_per_s = (cpu_seconds() - idle_cpu) /
                                   std::chrono::duration<double>(Clock::now() - idle_from).count();
          }
        }
        const auto t1 = Clock::now();
        body(comm);
        work_ms[static_cast<size_t>(r)] = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
      } catch (const std::exception& e) {
        verdict.fail("rank " + std::to_string(r) + ": " + e.what());
        if (!counted) {  // no rank waits for this one's arrival
          std::lock_guard<std::mutex> lock(arrival_mutex);
          if (++created == n) arrived.notify_all();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  times.create_ms = *std::max_element(create_ms.begin(), create_ms.end());
  times.work_ms = *std::max_element(work_ms.begin(), work_ms.end());
  times.destroy_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() - times.create_ms -
                     times.work_ms - o.idle_ms;
  return times;
}

void print_phase(const Options& o, const std::string& what, const PhaseTimes& t) {
  const double per = 1.0 / o.ranks / 1024.0;  // kB of the process -> MB per rank
  std::printf("ranks %d nodes %d x %d  %-28s create %8.1f ms  work %8.1f ms  rest %8.1f ms  "
              "idle %.3f CPU-s/s  per rank: anon %.2f MB file %.2f MB shmem %.2f MB\n",
              o.ranks, o.ranks / o.per_node, o.per_node, what.c_str(), t.create_ms, t.work_ms, t.destroy_ms,
              t.idle_cpu_per_s, t.memory.anon * per, t.memory.file * per, t.memory.shmem * per);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Verdict verdict;
  // One server for every phase; each communicator gets a fresh key space (instance names count per store).
  hiercoll::TcpStore server("127.0.0.1", 0, true, std::chrono::milliseconds(o.timeout_ms));
  const Reference ref = make_reference(o.ranks, o.count);
  const Memory before = memory_now();
  std::printf("process before any communicator: anon %.1f MB file %.1f MB\n", before.anon / 1024.0,
              before.file / 1024.0);

  PhaseTimes first;
  double requests_per_rank = 0;
  for (const std::string& algo : o.algos) {
    // Read by each communicator as it is made; no rank thread runs now. "auto": the selector's choice.
    if (algo == "auto") unsetenv("HIERCOLL_ALGO");
    else setenv("HIERCOLL_ALGO", algo.c_str(), 1);
    const uint64_t served = server.requests_served();
    std::vector<Steps> steps(static_cast<size_t>(o.ranks));
    const PhaseTimes t = run_phase(o, server.port(), verdict, [&](Communicator& comm) {
      run_collectives(comm, ref, o.count, verdict, steps[static_cast<size_t>(comm.rank())]);
    });
    print_phase(o, "collectives, HIERCOLL_ALGO=" + algo, t);
    if (&algo == &o.algos.front()) {
      first = t;
      requests_per_rank = static_cast<double>(server.requests_served() - served) / o.ranks;
    }
    std::printf("  slowest rank's ms per step:");
    for (size_t i = 0; i < steps[0].size(); ++i) {
      double slowest = 0;
      for (const Steps& rank_steps : steps) {
        if (i < rank_steps.size()) slowest = std::max(slowest, rank_steps[i].second);
      }
      std::printf(" %s %.1f%s", steps[0][i].first.c_str(), slowest, i + 1 < steps[0].size() ? "," : "\n");
    }
    std::printf("  store requests this phase: %llu (%.1f per rank)\n",
                static_cast<unsigned long long>(server.requests_served() - served),
                static_cast<double>(server.requests_served() - served) / o.ranks);
    if (verdict.failed()) {
      std::fprintf(stderr, "FAILED: %s\n", verdict.first_failure.c_str());
      return 1;
    }
  }

  // A rank aborts while every other rank waits in an allreduce it never joins: each must fail, naming it.
  unsetenv("HIERCOLL_ALGO");
  std::atomic<int64_t> aborted_at{0};
  std::vector<double> noticed_ms(static_cast<size_t>(o.ranks), -1.0);
  const PhaseTimes t = run_phase(o, server.port(), verdict, [&](Communicator& comm) {
    const int me = comm.rank();
    comm.barrier().wait();
    if (me == o.victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others are waiting by then
      aborted_at = Clock::now().time_since_epoch().count();
      comm.abort();
      return;
    }
    std::vector<float> buffer(64, 1.0f);
    try {
      comm.allreduce(buffer.data(), buffer.data(), buffer.size(), DataType::kFloat32, ReduceOp::kSum).wait();
      verdict.fail("rank " + std::to_string(me) + "'s allreduce finished without rank " + std::to_string(o.victim));
    } catch (const hiercoll::PeerLostError& e) {
      noticed_ms[static_cast<size_t>(me)] =
          std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch() -
                                                    Clock::duration(aborted_at.load())).count();
      if (e.rank() != o.victim) {
        verdict.fail("rank " + std::to_string(me) + " blamed rank " + std::to_string(e.rank()) + ", not " +
                     std::to_string(o.victim) + ": " + e.what());
      }
    } catch (const std::exception& e) {
      verdict.fail("rank " + std::to_string(me) + " failed without naming the lost rank: " + e.what());
    }
    comm.abort();
  });
  print_phase(o, "one rank aborts", t);
  std::vector<double> noticed;
  for (int r = 0; r < o.ranks; ++r) {
    if (r != o.victim) noticed.push_back(noticed_ms[static_cast<size_t>(r)]);
  }
  std::sort(noticed.begin(), noticed.end());
  const double slowest = noticed.back();
  std::printf("  rank %d aborted: the other ranks failed naming it after %.1f ms (first), %.1f (median), %.1f "
              "(last; limit %d ms)\n",
              o.victim, noticed.front(), noticed[noticed.size() / 2], slowest, o.notice_limit_ms);
  if (!verdict.failed() && slowest > o.notice_limit_ms) {
    verdict.fail("the slowest rank took " + std::to_string(slowest) + " ms to notice");
  }
  if (verdict.failed()) {
    std::fprintf(stderr, "FAILED: %s\n", verdict.first_failure.c_str());
    return 1;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // One line for scripts (scripts/study/scale-threads): the first phase's figures, the abort's, the process's peak.
  std::printf("RESULT ranks=%d per_node=%d create_ms=%.1f work_ms=%.1f requests_per_rank=%.1f idle_cpu=%.3f "
              "notice_median_ms=%.1f notice_last_ms=%.1f peak_rss_mb=%.1f\n",
              o.ranks, o.per_node, first.create_ms, first.work_ms, requests_per_rank, first.idle_cpu_per_s,
              noticed[noticed.size() / 2], slowest, static_cast<double>(usage.ru_maxrss) / 1024.0);
  std::printf("OK: %d ranks, every collective matched the serial reference on every rank\n", o.ranks);
  return 0;
}
