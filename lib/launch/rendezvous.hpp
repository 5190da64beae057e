#pragma once
// What the job launcher (mpirun, Slurm's srun, torchrun) tells a process about where to rendezvous, so that
// Communicator::from_env and hiercoll_torch need no hand-set address across hosts.
//
// PMIx is the launcher-neutral way: Open MPI's mpirun and Slurm (srun --mpi=pmix) both run a PMIx server that
// every process of the job can reach. Rank 0 publishes an address, the job fences, everyone reads it, which is
// what NCCL users do by hand with MPI_Bcast of the unique id. Built where PMIx's headers are found
// (HIERCOLL_WITH_PMIX); the library is loaded at run time (pmix.hpp).
#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace hiercoll::launch {

/// True when PMIx support is built in. Whether this process was started by a PMIx server is environment.cpp's to
/// tell (it reads PMIX_NAMESPACE); call pmix_share_from_rank0 only then.
bool pmix_built();
/// The loaded libpmix's version (PMIx_Get_version), "" where none loads or PMIx is not built in.
std::string pmix_version();

/// Every process of the job calls this; rank 0's `make_value()` is what each one returns. Only rank 0 calls
/// make_value (it may open a server first). Throws TimeoutError if the job's other processes do not fence
/// within `timeout`, InvalidUsageError if PMIx is not built in or no libpmix loads (naming what to install).
std::string pmix_share_from_rank0(const std::string& key, int rank, const std::function<std::string()>& make_value,
                                  std::chrono::milliseconds timeout);

/// The first host of a Slurm host list ("node[07-09,12],gpu1" -> "node07"), as SLURM_STEP_NODELIST /
/// SLURM_JOB_NODELIST write them; nullopt for an empty or malformed list.
std::optional<std::string> first_host_of(const std::string& slurm_nodelist);

}  // namespace hiercoll::launch
