// Communicator::from_env: rank, size and store from whatever launched us (hiercoll's own variables,
// torchrun, or Open MPI's mpirun).
#include <cctype>
#include <cstdlib>

#include "core/env.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll {
namespace {

// Stores this module makes for an MPI job live here; rank 0 removes them when done.
const std::string kJobStorePrefix = "file:///tmp/hiercoll-store-";

int first_int(std::initializer_list<const char*> names, const char* what) {
  for (const char* name : names) {
    if (core::env_string(name)) return static_cast<int>(core::env_int(name, -1));
  }
  std::string tried;
  for (const char* name : names) tried += std::string(tried.empty() ? "" : ", ") + name;
  throw InvalidUsageError(std::string("rendezvous_from_env: no ") + what + " in the environment (looked at " +
                          tried + ")");
}

std::string store_url() {
  if (auto url = core::env_string("HIERCOLL_STORE")) return *url;
  auto addr = core::env_string("MASTER_ADDR");
  auto port = core::env_string("MASTER_PORT");
  if (addr && port) return "tcp://" + *addr + ":" + *port;
  // Under mpirun without a store address: all ranks on one host share a file store named after the job.
  for (const char* job : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    if (auto id = core::env_string(job)) {
      for (char& c : *id) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return kJobStorePrefix + *id;
    }
  }
  throw InvalidUsageError(
      "rendezvous_from_env: no rendezvous; set HIERCOLL_STORE=tcp://host:port (or file:///dir), or "
      "MASTER_ADDR and MASTER_PORT");
}

}  // namespace

Rendezvous rendezvous_from_env(std::chrono::milliseconds timeout) {
  int rank = first_int({"HIERCOLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, "rank");
  int size = first_int({"HIERCOLL_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, "world size");
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidUsageError("rendezvous_from_env: rank " + std::to_string(rank) + " / size " + std::to_string(size) +
                            " is not a valid pair");
  }
  std::string url = store_url();
  std::shared_ptr<Store> store;
  if (url.rfind(kJobStorePrefix, 0) == 0) {
    store = std::make_shared<FileStore>(url.substr(7), timeout, /*remove_when_done=*/rank == 0);
  } else {
    store = open_store(url, rank, timeout);
  }
  return {rank, size, std::move(store)};
}

Communicator Communicator::from_env(CommOptions options) {
  Rendezvous rendezvous = rendezvous_from_env(options.timeout);
  return create(std::move(rendezvous.store), rendezvous.rank, rendezvous.size, std::move(options));
}

}  // namespace hiercoll
