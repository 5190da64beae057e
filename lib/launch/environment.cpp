// The launcher's environment (environment.hpp): rank, size and store from whatever launched us (hiercoll's own
// variables, torchrun, Open MPI's mpirun or Slurm's srun, through PMIx where the launcher runs a PMIx server).
#include "launch/environment.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <limits>

#include "base/env.hpp"
#include "base/log.hpp"
#include "base/settings.hpp"
#include "base/text.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/store.hpp"
#include "launch/rendezvous.hpp"
#include "topo/net.hpp"

namespace hiercoll {
namespace {

// Stores this module makes for an MPI job live here; rank 0 removes them when done.
const std::string kJobStorePrefix = "file:///tmp/hiercoll-store-";

int first_int(std::initializer_list<const char*> names, const char* what) {
  for (const char* name : names) {
    if (base::env_string(name)) {
      return static_cast<int>(base::env_int_in(name, -1, 0, std::numeric_limits<int>::max()));
    }
  }
  std::string tried;
  for (const char* name : names) base::append_listed(tried, name);
  throw InvalidUsageError(std::string("rendezvous_from_env: no ") + what + " in the environment (looked at " + tried +
                          ")");
}

// Slurm without PMIx: the job's first node serves, on MASTER_PORT or a port derived from the job id (so that two
// jobs sharing a node do not collide), as PyTorch Lightning and others do.
std::optional<std::string> slurm_address() {
  auto job = base::env_string("SLURM_JOB_ID");
  auto nodes = base::env_string("SLURM_STEP_NODELIST");
  if (!nodes) nodes = base::env_string("SLURM_JOB_NODELIST");
  if (!job || !nodes) return std::nullopt;
  auto host = launch::first_host_of(*nodes);
  if (!host) throw InvalidUsageError("rendezvous_from_env: cannot read Slurm's node list '" + *nodes + "'");
  int64_t port = base::env_int_in("MASTER_PORT", 20000 + std::atoll(job->c_str()) % 20000, 1, 65535);
  return *host + ":" + std::to_string(port);
}

// A port free on `address` now (torch's TCPStore binds it moments later, as torchrun's standalone mode does).
int free_port(const std::string& address) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  socklen_t length = sizeof sa;
  bool ok = fd >= 0 && inet_pton(AF_INET, address.c_str(), &sa.sin_addr) == 1 &&
            ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &length) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw SystemError("launcher_rendezvous_address: no free port on " + address);
  return ntohs(sa.sin_port);
}

// Whether the launcher says the job's ranks run on several hosts: Open MPI's local and world sizes, Slurm's node
// count. False where none says.
bool spans_hosts() {
  auto local = base::env_string("OMPI_COMM_WORLD_LOCAL_SIZE"), all = base::env_string("OMPI_COMM_WORLD_SIZE");
  if (local && all) return *local != *all;
  if (auto nodes = base::env_string("SLURM_JOB_NUM_NODES")) return std::atoi(nodes->c_str()) > 1;
  return false;
}

// The address a rendezvous server rank 0 runs is published at: HIERCOLL_SOCKET_IFNAME's, else the one other hosts
// most likely reach (topo::outward_address: the default route's interface; never loopback or a docker-style bridge,
// which carry the same address on every host).
std::string published_address() {
  const std::string ifname = base::Settings::from_env().socket_ifname;
  if (!ifname.empty()) return topo::interface_address(ifname);
  const std::string address = topo::outward_address();
  // Loopback is what outward_address falls back to: right on one host, and across hosts a rendezvous nobody reaches.
  if (address == "127.0.0.1" && spans_hosts()) {
    throw InvalidUsageError("rendezvous: this job spans several hosts, and rank 0's host has no address the others "
                            "can reach (only loopback or host-only bridges are up): set HIERCOLL_SOCKET_IFNAME to the "
                            "interface that connects the hosts");
  }
  return address;
}

// Under a PMIx server (mpirun, srun --mpi=pmix) with PMIx support built in.
bool started_by_pmix() { return launch::pmix_built() && base::env_string("PMIX_NAMESPACE").has_value(); }

}  // namespace

std::optional<std::string> launcher_rendezvous_address(int rank, std::chrono::milliseconds timeout) {
  if (started_by_pmix()) {
    return launch::pmix_share_from_rank0(
        "rendezvous", rank,
        [] {
          std::string address = published_address();
          return address + ":" + std::to_string(free_port(address));
        },
        timeout);
  }
  return slurm_address();
}

std::map<std::string, std::string> torch_env_from_launcher(std::chrono::milliseconds timeout) {
  std::map<std::string, std::string> out;
  auto value = [&](const std::string& name) -> std::optional<std::string> {
    auto it = out.find(name);
    return it != out.end() ? std::optional<std::string>(it->second) : base::env_string(name.c_str());
  };
  struct Alias {
    const char* torch_name;
    const char* open_mpi;
    const char* slurm;
  };
  static constexpr Alias kAliases[] = {{"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"},
                                       {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"},
                                       {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}};
  for (const Alias& alias : kAliases) {
    if (value(alias.torch_name)) continue;
    if (auto v = base::env_string(alias.open_mpi)) {
      out[alias.torch_name] = *v;
    } else if (auto w = base::env_string(alias.slurm)) {
      out[alias.torch_name] = *w;
    }
  }
  if (!base::env_string("MASTER_ADDR") && value("RANK")) {
    const int rank = std::atoi(value("RANK")->c_str());
    if (auto agreed = launcher_rendezvous_address(rank, timeout)) {
      const auto colon = agreed->rfind(':');
      out["MASTER_ADDR"] = agreed->substr(0, colon);
      if (!base::env_string("MASTER_PORT")) out["MASTER_PORT"] = agreed->substr(colon + 1);  // a hand-set one wins
    } else {
      auto local = base::env_string("OMPI_COMM_WORLD_LOCAL_SIZE"), all = base::env_string("OMPI_COMM_WORLD_SIZE");
      if (local && all && *local == *all) out["MASTER_ADDR"] = "127.0.0.1";  // mpirun, one node
    }
  }
  if (!value("MASTER_PORT")) out["MASTER_PORT"] = "29500";
  return out;
}

namespace launch {

std::string rendezvous_host_from_env() {
  if (auto url = base::env_string("HIERCOLL_STORE")) {
    const std::string text(*url), scheme = "tcp://";
    if (text.compare(0, scheme.size(), scheme) != 0) return {};
    const std::string rest = text.substr(scheme.size());
    const auto colon = rest.rfind(':');
    std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    return host;
  }
  return base::env_string("MASTER_ADDR").value_or("");
}

}  // namespace launch

Rendezvous rendezvous_from_env(std::chrono::milliseconds timeout) {
  int rank =
      first_int({"HIERCOLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "PMI_RANK"}, "rank");
  int size = first_int({"HIERCOLL_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE"},
                       "world size");
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidUsageError("rendezvous_from_env: rank " + std::to_string(rank) + " / size " + std::to_string(size) +
                            " is not a valid pair");
  }
  const std::string token = base::env_string("HIERCOLL_JOB_TOKEN").value_or("");
  auto job_store = [&](const std::string& url) {
    return Rendezvous{rank, size, open_store(url, rank, timeout, token)};
  };
  if (auto url = base::env_string("HIERCOLL_STORE")) return job_store(*url);
  auto addr = base::env_string("MASTER_ADDR");
  auto port = base::env_string("MASTER_PORT");
  if (addr && port) return job_store("tcp://" + *addr + ":" + *port);

  if (started_by_pmix()) {
    // Rank 0 opens the server first and publishes the port it got: no port is guessed, none can collide.
    std::shared_ptr<Store> server;
    std::string url = launch::pmix_share_from_rank0(
        "store", rank,
        [&] {
          std::string address = published_address();
          auto store = std::make_shared<TcpStore>(address, 0, /*is_server=*/true, timeout, token);
          server = store;
          return "tcp://" + address + ":" + std::to_string(store->port());
        },
        timeout);
    HIERCOLL_LOG(kInfo, "rendezvous: store " << url << " (published by rank 0 through PMIx)");
    return rank == 0 ? Rendezvous{rank, size, server} : job_store(url);
  }
  if (auto slurm = slurm_address()) {
    HIERCOLL_LOG(kInfo, "rendezvous: store tcp://" << *slurm << " (Slurm's first node)");
    return job_store("tcp://" + *slurm);
  }
  // mpirun without PMIx: all ranks on one host share a file store named after the job.
  for (const char* job : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    if (auto id = base::env_string(job)) {
      for (char& c : *id) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return {rank, size, std::make_shared<FileStore>(kJobStorePrefix.substr(7) + *id, timeout, rank == 0)};
    }
  }
  throw InvalidUsageError(
      "rendezvous_from_env: no rendezvous; set HIERCOLL_STORE=tcp://host:port (or file:///dir), or MASTER_ADDR and "
      "MASTER_PORT, or launch with mpirun / srun (PMIx)");
}

}  // namespace hiercoll
