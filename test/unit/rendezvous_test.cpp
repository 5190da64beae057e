// How a process finds its rank and rendezvous from what launched it (lib/launch).
#include "launch/rendezvous.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "hiercoll/errors.hpp"
#include "hiercoll/store.hpp"
#include "topo/net.hpp"

using namespace hiercoll;

namespace {
using Vars = std::map<std::string, std::string>;

// Sets the given variables (empty value: unset) for one test and restores the previous environment afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value.empty()) {
        unsetenv(name.c_str());
      } else {
        setenv(name.c_str(), value.c_str(), 1);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Every variable rendezvous_from_env reads, unset, so only what a test sets counts.
std::map<std::string, std::string> clean_launcher_env() {
  std::map<std::string, std::string> env;
  for (const char* name : {"HIERCOLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "PMI_RANK",
                           "HIERCOLL_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE",
                           "HIERCOLL_STORE", "MASTER_ADDR", "MASTER_PORT", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                           "SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    env[name] = "";
  }
  return env;
}
}  // namespace

TEST_CASE("the first host of a Slurm node list", "[launch]") {
  CHECK(launch::first_host_of("node07") == "node07");
  CHECK(launch::first_host_of("node[07-09,12]") == "node07");
  CHECK(launch::first_host_of("gpu-a[003,5-6],gpu-b1") == "gpu-a003");  // zero padding kept
  CHECK(launch::first_host_of("login1,node[1-4]") == "login1");
  CHECK(launch::first_host_of("rack[2]") == "rack2");
  CHECK_FALSE(launch::first_host_of(""));
  CHECK_FALSE(launch::first_host_of("node[1-4"));  // unbalanced
  CHECK_FALSE(launch::first_host_of("[1-4]"));     // no name
}

TEST_CASE("HIERCOLL_SOCKET_IFNAME names the interface whose IPv4 address a rendezvous server publishes",
          "[launch]") {
  CHECK(topo::interface_address("lo") == "127.0.0.1");
  CHECK_THROWS_WITH(topo::interface_address("no-such-nic0"), Catch::Contains("no-such-nic0"));
}

TEST_CASE("under srun without PMIx, rank 0 serves the store on the first node at a port from the job id", "[launch]") {
  auto values = clean_launcher_env();
  values.insert_or_assign("SLURM_PROCID", "0");
  values.insert_or_assign("SLURM_NTASKS", "1");
  values.insert_or_assign("SLURM_JOB_ID", "4242");
  values.insert_or_assign("SLURM_JOB_NODELIST", "localhost");
  ScopedEnv env(values);
  CHECK(launcher_rendezvous_address(0) == "localhost:24242");  // 20000 + 4242 % 20000
  Rendezvous rendezvous = rendezvous_from_env(std::chrono::seconds(10));
  CHECK(rendezvous.rank == 0);
  CHECK(rendezvous.size == 1);
  auto* tcp = dynamic_cast<TcpStore*>(rendezvous.store.get());
  REQUIRE(tcp != nullptr);
  CHECK(tcp->port() == 24242);
  rendezvous.store->set("k", std::string("v"));
  CHECK(rendezvous.store->get("k") == Store::Bytes{'v'});
}

TEST_CASE("without any launcher the error names what to set", "[launch]") {
  auto values = clean_launcher_env();
  values.insert_or_assign("RANK", "0");
  values.insert_or_assign("WORLD_SIZE", "2");
  ScopedEnv env(values);
  CHECK_FALSE(launcher_rendezvous_address(0));
  CHECK_THROWS_WITH(rendezvous_from_env(std::chrono::seconds(1)), Catch::Contains("HIERCOLL_STORE") &&
                                                                        Catch::Contains("MASTER_ADDR") &&
                                                                        Catch::Contains("mpirun / srun"));
  ScopedEnv no_size(Vars{{"WORLD_SIZE", ""}});
  CHECK_THROWS_WITH(rendezvous_from_env(std::chrono::seconds(1)), Catch::Contains("no world size"));
}

TEST_CASE("a rank or world size that does not fit an int is refused, not narrowed", "[launch]") {
  auto values = clean_launcher_env();
  values.insert_or_assign("RANK", "4294967296");  // an int would make it rank 0
  values.insert_or_assign("WORLD_SIZE", "2");
  values.insert_or_assign("HIERCOLL_STORE", "file:///tmp/hiercoll-unused-store");
  ScopedEnv env(values);
  CHECK_THROWS_WITH(rendezvous_from_env(std::chrono::seconds(1)),
                    Catch::Contains("RANK=4294967296 is out of range (0 to 2147483647)"));
  ScopedEnv size(Vars{{"RANK", "0"}, {"WORLD_SIZE", "-2"}});
  CHECK_THROWS_WITH(rendezvous_from_env(std::chrono::seconds(1)), Catch::Contains("WORLD_SIZE=-2 is out of range"));
}
