#include "launcher.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace hiercoll::test {
namespace {

std::string make_temp_dir() {
  char pattern[] = "/tmp/hiercoll-test-XXXXXX";
  if (mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The signal forward_signals caught and not yet acted on; written by the handler, read by launch()'s wait loop.
volatile sig_atomic_t g_caught_signal = 0;

void catch_signal(int sig) { g_caught_signal = sig; }

// Installs catch_signal for SIGTERM, SIGINT and SIGHUP while alive (when asked), and restores what was there. A signal
// this process was started with ignored stays ignored: nohup's SIGHUP, a non-interactive shell's background job's
// SIGINT.
class ForwardedSignals {
 public:
  explicit ForwardedSignals(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    g_caught_signal = 0;
    struct sigaction action {};
    action.sa_handler = catch_signal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < 3; ++i) {
      sigaction(kSignals[i], nullptr, &previous_[i]);
      if (previous_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &action, nullptr);
    }
  }
  ~ForwardedSignals() {
    if (!enabled_) return;
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};
  bool enabled_;
  struct sigaction previous_[3] {};
};

}  // namespace

bool LaunchResult::all_ok() const {
  if (timed_out) return false;
  for (const auto& rank : ranks) {
    if (rank.exit_code != 0) return false;
  }
  return true;
}

std::string LaunchResult::report() const {
  std::ostringstream out;
  if (timed_out) out << "TIMED OUT\n";
  for (size_t r = 0; r < ranks.size(); ++r) {
    out << "---- rank " << r << " exit " << ranks[r].exit_code << " ----\n" << ranks[r].output << "\n";
  }
  return out.str();
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

// A port free where rank 0 will listen: inside its node's network namespace when it has one, since each
// namespace has ports of its own and one free here may be taken there (a benchmark's store once found its port
// held in hc0 just after another MPI's launcher ran there). Found by a child that joins the namespace; where that
// fails, a port free here.
uint16_t free_port_in(const std::string& netns) {
  if (netns.empty()) return free_port();
  const std::string path = "/var/run/netns/" + netns;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return free_port();
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    uint16_t port = 0;
    const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns >= 0 && setns(ns, CLONE_NEWNET) == 0) port = free_port();
    (void)!write(pipe_fds[1], &port, sizeof(port));
    _exit(0);
  }
  close(pipe_fds[1]);
  uint16_t port = 0;
  if (child < 0 || read(pipe_fds[0], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) port = 0;
  close(pipe_fds[0]);
  if (child > 0) waitpid(child, nullptr, 0);
  return port != 0 ? port : free_port();
}

// The network namespace rank r runs in ("" for none): the prefix and its node's number.
std::string netns_of(const LaunchOptions& options, int r) {
  if (options.netns_prefix.empty() || r >= static_cast<int>(options.node_of.size())) return std::string();
  return options.netns_prefix + std::to_string(options.node_of[r]);
}

}  // namespace

std::vector<int> regular_nodes(int nodes, int per_node) {
  std::vector<int> node_of;
  for (int n = 0; n < nodes; ++n) node_of.insert(node_of.end(), static_cast<size_t>(per_node), n);
  return node_of;
}

LaunchResult launch(int ranks, const std::string& program, const std::vector<std::string>& args,
                    const LaunchOptions& options) {
  std::string dir = make_temp_dir();
  // A file store cannot cross namespaces' network, but it can cross their (shared) file system; a TCP
  // store in namespaces must listen on rank 0's node address.
  std::string store = "file://" + dir + "/store";
  if (options.tcp_store) {
    const uint16_t port = options.store_port ? options.store_port : free_port_in(netns_of(options, 0));
    store = "tcp://" + options.store_host + ":" + std::to_string(port);
  }
  // A secret of this job for the TCP store (HIERCOLL_JOB_TOKEN): a stray client or another job's rank is dropped.
  std::string token;
  std::random_device random;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof word, "%08x", static_cast<unsigned>(random()));
    token += word;
  }
  int started = options.launch_only >= 0 ? options.launch_only : ranks;
  std::vector<int> cpus;  // the CPUs to pin ranks to, in order; empty: none pinned
  cpu_set_t allowed;
  if (options.bind_cores && sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) >= ranks) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    }
  }
  ForwardedSignals forwarded(options.forward_signals);  // before the first fork: a signal during start-up counts
  const pid_t launcher = getpid();
  std::vector<pid_t> pids;
  for (int r = 0; r < started; ++r) {
    std::fflush(nullptr);  // or the child inherits unflushed output and prints it twice
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      setpgid(0, 0);  // its own group, so a timeout kills whatever it started too
      // No rank outlives its launcher: killed with it (SIGKILL cannot be forwarded), or if it died before this line.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) _exit(125);
      if (!cpus.empty()) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<size_t>(r)], &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) std::perror("hiercoll_launch: sched_setaffinity");
      }
      if (!options.inherit_output) {
        std::string log = dir + "/rank" + std::to_string(r) + ".log";
        if (freopen(log.c_str(), "w", stdout) == nullptr) _exit(126);
        dup2(fileno(stdout), STDERR_FILENO);
      }
      setenv("HIERCOLL_RANK", std::to_string(r).c_str(), 1);
      setenv("HIERCOLL_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("HIERCOLL_STORE", store.c_str(), 1);
      if (options.tcp_store) setenv("HIERCOLL_JOB_TOKEN", token.c_str(), 1);  // options.env may override it
      for (const auto& [key, value] : options.env) setenv(key.c_str(), value.c_str(), 1);
      if (r < static_cast<int>(options.node_of.size())) {
        setenv("HIERCOLL_NODE_ID", ("node" + std::to_string(options.node_of[r])).c_str(), 1);
      }
      auto extra = options.rank_env.find(r);
      if (extra != options.rank_env.end()) {
        for (const auto& [key, value] : extra->second) setenv(key.c_str(), value.c_str(), 1);
      }
      std::vector<char*> argv;
      const std::string netns = netns_of(options, r);
      if (!netns.empty()) {
        for (const char* word : {"ip", "netns", "exec"}) argv.push_back(const_cast<char*>(word));
        argv.push_back(const_cast<char*>(netns.c_str()));
      }
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::perror("execv");
      _exit(127);
    }
    pids.push_back(pid);
  }

  LaunchResult result;
  result.ranks.resize(static_cast<size_t>(ranks));
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  size_t running = pids.size();
  std::vector<bool> done(pids.size(), false);
  // Ends ranks still running: their process groups, so whatever they started goes too.
  auto signal_running = [&](int sig) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!done[r]) kill(-pids[r], sig);
    }
  };
  std::optional<std::chrono::steady_clock::time_point> term_at, kill_at;
  while (running > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --running;
        result.ranks[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        if (result.ranks[r].exit_code != 0 && result.first_failed < 0) {
          result.first_failed = static_cast<int>(r);
          if (options.end_job_on_failure) term_at = std::chrono::steady_clock::now() + options.end_grace;
        }
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (const int sig = g_caught_signal; options.forward_signals && sig != 0 && running > 0) {
      g_caught_signal = 0;
      const bool again = result.signal != 0;
      if (!again) result.signal = sig;
      signal_running(again ? SIGKILL : sig);  // a second signal: the user will not wait for the grace
      term_at.reset();
      kill_at = now + options.end_grace;
    }
    if (running > 0 && term_at && now >= *term_at) {
      result.ended = true;
      signal_running(SIGTERM);
      term_at.reset();
      kill_at = now + options.end_grace;
    }
    if (running > 0 && kill_at && now >= *kill_at) {
      signal_running(SIGKILL);
      kill_at.reset();
    }
    if (running > 0 && now > deadline) {
      result.timed_out = true;
      signal_running(SIGKILL);
      for (size_t r = 0; r < pids.size(); ++r) {
        if (!done[r]) waitpid(pids[r], nullptr, 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < started; ++r) result.ranks[r].pid = static_cast<int>(pids[r]);
  for (int r = 0; r < started; ++r) result.ranks[r].output = read_all(dir + "/rank" + std::to_string(r) + ".log");
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0) { /* best effort */
  }
  return result;
}

}  // namespace hiercoll::test
