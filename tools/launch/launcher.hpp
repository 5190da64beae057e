#pragma once
// A fork/exec launcher for multi-process tests and benchmarks: starts `ranks` copies of a program with HIERCOLL_RANK,
// HIERCOLL_WORLD_SIZE and HIERCOLL_STORE set, captures each rank's output, and kills them all if any
// outlives the timeout.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hiercoll::test {

struct RankResult {
  int exit_code = -1;  ///< -signal if killed by a signal
  std::string output;  ///< stdout and stderr together
  int pid = 0;         ///< the process id it ran as (0: never started); shm segments carry their creator's
};

struct LaunchOptions {
  std::map<std::string, std::string> env;  ///< extra variables for every rank
  std::chrono::seconds timeout{120};
  bool tcp_store = false;  ///< rank 0 serves a TCP store (default: a file store in a fresh directory)
  uint16_t store_port = 0;  ///< with tcp_store: its port (0: any free one)
  int launch_only = -1;    ///< start only this many of the ranks (to simulate ranks that never arrive)
  /// Per-rank extra variables, e.g. {{2, {{"HIERCOLL_TEST_DIE_AT", "3"}}}}.
  std::map<int, std::map<std::string, std::string>> rank_env;
  bool inherit_output = false;  ///< ranks write to our stdout/stderr instead of captured logs
  /// Emulated nodes on one host: rank r gets HIERCOLL_NODE_ID=node<node_of[r]> (empty: no override).
  std::vector<int> node_of;
  /// With node_of: run rank r inside network namespace netns_prefix + node_of[r] (scripts/emulation/cluster), where each
  /// rank chooses its NIC among the node's rails as on a real cluster; rank 0 serves the TCP store at store_host.
  std::string netns_prefix;
  /// As mpirun and torchrun do: once a rank fails (a non-zero exit or a signal), the others have `end_grace` to
  /// report their own errors and exit, then get SIGTERM, and SIGKILL `end_grace` later.
  bool end_job_on_failure = false;
  std::chrono::milliseconds end_grace{3000};
  std::string store_host = "127.0.0.1";  ///< where rank 0 serves the TCP store
  /// As mpirun does: SIGTERM, SIGINT or SIGHUP to this process goes to every rank's process group, and SIGKILL
  /// follows `end_grace` later (at once on a second signal); launch() then returns with LaunchResult::signal set.
  /// Handlers are installed for the call's duration. Whether or not this is set, a rank is SIGKILLed when the
  /// thread that called launch() dies (PR_SET_PDEATHSIG), so no rank outlives a killed launcher.
  bool forward_signals = false;
  /// Pin rank r to the r-th CPU this launcher may run on, as mpirun --bind-to core does, where there are as many
  /// CPUs as ranks (else nothing is pinned).
  bool bind_cores = false;
};

struct LaunchResult {
  std::vector<RankResult> ranks;
  bool timed_out = false;
  int first_failed = -1;  ///< the first rank seen to fail, -1 if none did
  bool ended = false;     ///< end_job_on_failure signalled ranks that were still running
  int signal = 0;         ///< forward_signals: the signal this process got and passed on, 0 if none
  bool all_ok() const;
  std::string report() const;  ///< every rank's exit code and output, for failure messages
};

/// A TCP port free on loopback now.
uint16_t free_port();

/// node_of for `nodes` x `per_node` ranks, consecutive ranks per node.
std::vector<int> regular_nodes(int nodes, int per_node);

LaunchResult launch(int ranks, const std::string& program, const std::vector<std::string>& args,
                    const LaunchOptions& options = {});

}  // namespace hiercoll::test
