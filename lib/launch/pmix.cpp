// PMIx loaded at run time (pmix.hpp).
#include "launch/pmix.hpp"

#include <dlfcn.h>

#include "base/dynamic_library.hpp"
#include "base/log.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::launch {
namespace {

// The loader's path first (RHEL, Amazon Linux, a module system's LD_LIBRARY_PATH), then where distributions and
// installers keep it off that path.
const char* const kSearch[] = {"libpmix.so.2", "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2",
                               "/opt/amazon/pmix/lib/libpmix.so.2", "/opt/pmix/lib/libpmix.so.2"};

template <typename Function>
bool bind(void* handle, const char* name, Function& out) {
  out = reinterpret_cast<Function>(dlsym(handle, name));
  return out != nullptr;
}

struct Loaded {
  Pmix lib;
  std::string error;  // "" once loaded
};

Loaded load() {
  Loaded out;
  std::string tried;
  for (const char* file : kSearch) {
    // RTLD_LOCAL: our copy's symbols cannot interpose on the PMIx an MPI library of the process loaded (they are
    // one library where both found the same file, which PMIx's own reference count then shares).
    void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += std::string("\n  ") + (why ? why : file);
      continue;
    }
    Pmix& lib = out.lib;
    const bool complete = bind(handle, "PMIx_Init", lib.init) && bind(handle, "PMIx_Finalize", lib.finalize) &&
                          bind(handle, "PMIx_Put", lib.put) && bind(handle, "PMIx_Commit", lib.commit) &&
                          bind(handle, "PMIx_Fence", lib.fence) && bind(handle, "PMIx_Get", lib.get) &&
                          bind(handle, "PMIx_Error_string", lib.error_string) &&
                          bind(handle, "PMIx_Get_version", lib.get_version);
    if (!complete) {
      tried += std::string("\n  ") + file + ": not a PMIx library (an entry point is missing)";
      lib = Pmix{};
      dlclose(handle);
      continue;
    }
    lib.path = base::loaded_path(handle, file);
    HIERCOLL_LOG(kInfo, "PMIx: " << lib.path << ", " << lib.get_version());
    return out;
  }
  out.error = "this job was started by a PMIx launcher (mpirun, srun --mpi=pmix), but no PMIx library could be "
              "loaded to read its rendezvous. Searched:" + tried +
              "\nInstall PMIx (Debian and Ubuntu: apt-get install libpmix2; RHEL and Amazon Linux: pmix), put its "
              "libpmix.so.2 on LD_LIBRARY_PATH, or give the rendezvous yourself: MASTER_ADDR and MASTER_PORT, or "
              "HIERCOLL_STORE.";
  return out;
}

const Loaded& loaded() {
  static const Loaded once = load();
  return once;
}

}  // namespace

const Pmix& pmix() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw InvalidUsageError(l.error);
  return l.lib;
}

std::string pmix_loaded_version() {
  const Loaded& l = loaded();
  if (!l.error.empty()) return "";
  const char* text = l.lib.get_version();
  return text ? text : "";
}

}  // namespace hiercoll::launch
