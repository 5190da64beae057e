#pragma once
// PMIx, loaded at run time and never linked, as libfabric is (transport/fabric/libfabric.hpp): only jobs that a PMIx
// launcher started (mpirun, srun --mpi=pmix) use it, a wheel cannot know where the host keeps it (Debian puts
// libpmix.so.2 outside the loader's path, AWS's EFA installer under /opt/amazon/pmix), and a process linked against
// it could not even load where it is missing. The calls below are the PMIx standard's, whose structures
// (pmix_proc_t, pmix_value_t, pmix_info_t) keep their layout across PMIx 3, 4 and 5; the header's helper macros,
// which call into the library from version 4, are not used.
#include <pmix.h>

#include <string>

namespace hiercoll::launch {

struct Pmix {
  pmix_status_t (*init)(pmix_proc_t* proc, pmix_info_t* info, size_t ninfo) = nullptr;
  pmix_status_t (*finalize)(const pmix_info_t* info, size_t ninfo) = nullptr;
  pmix_status_t (*put)(pmix_scope_t scope, const char* key, pmix_value_t* value) = nullptr;
  pmix_status_t (*commit)() = nullptr;
  pmix_status_t (*fence)(const pmix_proc_t* procs, size_t nprocs, const pmix_info_t* info, size_t ninfo) = nullptr;
  pmix_status_t (*get)(const pmix_proc_t* proc, const char* key, const pmix_info_t* info, size_t ninfo,
                       pmix_value_t** value) = nullptr;
  const char* (*error_string)(pmix_status_t status) = nullptr;
  const char* (*get_version)() = nullptr;
  std::string path;  ///< the file loaded, as the loader resolved it
};

/// The process's PMIx, loaded by the first call (thread-safe; never unloaded): the first that loads of libpmix.so.2
/// on the loader's path, Debian's and Ubuntu's /usr/lib/<triplet>/pmix2/lib, AWS's /opt/amazon/pmix/lib and
/// /opt/pmix/lib. Throws InvalidUsageError naming each place searched and what to do instead.
const Pmix& pmix();

/// "" where no PMIx loads (never throws).
std::string pmix_loaded_version();

}  // namespace hiercoll::launch
