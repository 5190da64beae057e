// hiercoll_launch: start N local ranks of a program with a rendezvous store, like a minimal mpirun.
//   hiercoll_launch -n 4 [--ranks-per-node K] [--tcp-store] [--timeout SECONDS] [--bind-to core|none]
//                   [-x NAME=VALUE]... -- program [args]
// --ranks-per-node emulates nodes on one host: ranks r*K..r*K+K-1 get HIERCOLL_NODE_ID=node<r>.
// --netns PREFIX (with --ranks-per-node) runs node k's ranks inside namespace PREFIXk (scripts/emulation/cluster).
// As mpirun and torchrun, it ends the job when a rank fails: the others get 3 s to report their own errors (a dead
// peer is noticed in well under one), then SIGTERM, then SIGKILL; it exits with the first failure's status (128 +
// the signal for a rank a signal ended). --keep-going waits for every rank instead.
// SIGTERM, SIGINT and SIGHUP to it go to every rank (and what the rank started), SIGKILL follows 3 s later, and it
// exits with 128 + the signal; killed outright, it takes its ranks with it (PR_SET_PDEATHSIG).
// --bind-to core (the default where this host has a CPU for every rank, as mpirun's for 2 ranks and Intel MPI's)
// pins rank r to the r-th CPU the launcher may use: unpinned ranks that wait on each other's shared-memory flags
// now and then find themselves on one core, which the scheduler undoes only milliseconds later. --bind-to none
// leaves them to the scheduler.
#include <cstdio>
#include <csignal>
#include <cstring>
#include <string>

#include "launcher.hpp"

int main(int argc, char** argv) {
  int ranks = 1, ranks_per_node = 0;
  hiercoll::test::LaunchOptions options;
  options.inherit_output = true;
  options.timeout = std::chrono::seconds(3600);
  options.end_job_on_failure = true;
  options.bind_cores = true;
  options.forward_signals = true;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if ((arg == "-n" || arg == "-np") && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (arg == "--ranks-per-node" && i + 1 < argc) {
      ranks_per_node = std::atoi(argv[++i]);
    } else if (arg == "--netns" && i + 1 < argc) {
      options.netns_prefix = argv[++i];
      options.store_host = "10.77.0.1";  // scripts/emulation/cluster's first node
    } else if (arg == "--bind-to" && i + 1 < argc) {
      const std::string how = argv[++i];
      if (how != "core" && how != "none") {
        std::fprintf(stderr, "hiercoll_launch: --bind-to wants core or none, got '%s'\n", how.c_str());
        return 2;
      }
      options.bind_cores = how == "core";
    } else if (arg == "--keep-going") {
      options.end_job_on_failure = false;
    } else if (arg == "--tcp-store") {
      options.tcp_store = true;
    } else if (arg == "--timeout" && i + 1 < argc) {
      options.timeout = std::chrono::seconds(std::atoi(argv[++i]));
    } else if (arg == "-x" && i + 1 < argc) {
      std::string kv = argv[++i];
      auto eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "hiercoll_launch: -x wants NAME=VALUE, got '%s'\n", kv.c_str());
        return 2;
      }
      options.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else {
      break;
    }
  }
  if (i >= argc || ranks < 1) {
    std::fprintf(stderr,
                 "usage: hiercoll_launch -n RANKS [--ranks-per-node K [--netns PREFIX]] [--tcp-store] [--timeout S] "
                 "[--keep-going] [--bind-to core|none] [-x NAME=VALUE]... -- program [args]\n");
    return 2;
  }
  if (ranks_per_node > 0) {  // emulate nodes on this host (HIERCOLL_NODE_ID)
    for (int r = 0; r < ranks; ++r) options.node_of.push_back(r / ranks_per_node);
  }
  std::vector<std::string> args(argv + i + 1, argv + argc);
  auto result = hiercoll::test::launch(ranks, argv[i], args, options);
  // A rank's status as a shell gives it: its exit code, or 128 + the signal that ended it.
  auto status_of = [&](size_t r) {
    const int code = result.ranks[r].exit_code;
    return code < 0 ? 128 - code : code;
  };
  for (size_t r = 0; r < result.ranks.size(); ++r) {
    const int code = result.ranks[r].exit_code;
    if (code > 0) std::fprintf(stderr, "hiercoll_launch: rank %zu exited with %d\n", r, code);
    if (code < 0) std::fprintf(stderr, "hiercoll_launch: rank %zu was killed by signal %d (%s)\n", r, -code, strsignal(-code));
  }
  if (result.signal != 0) {
    std::fprintf(stderr, "hiercoll_launch: got signal %d (%s) and passed it to every rank\n", result.signal,
                 strsignal(result.signal));
    return 128 + result.signal;
  }
  if (result.timed_out) {
    std::fprintf(stderr, "hiercoll_launch: timed out, all ranks killed\n");
    return 124;
  }
  if (result.first_failed < 0) return 0;
  const size_t first = static_cast<size_t>(result.first_failed);
  std::fprintf(stderr, "hiercoll_launch: rank %zu failed first (status %d)%s\n", first, status_of(first),
               result.ended ? "; the ranks still running were ended" : "");
  return status_of(first);
}
