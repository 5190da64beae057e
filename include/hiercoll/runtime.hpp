#pragma once
// What this process's hiercoll runs on: the libraries it found at run time and what it was built with, for a check
// of an install (python -m hiercoll_torch.check) and for bug reports.
#include <string>
#include <vector>

#include "hiercoll/export.hpp"

namespace hiercoll {

struct RuntimeReport {
  std::string version;                 ///< hiercoll's
  bool libfabric_loaded = false;
  std::string libfabric_path;          ///< the file loaded (HIERCOLL_LIBFABRIC, /opt/amazon/efa, the loader's path)
  std::string libfabric_version;       ///< "major.minor" of the loaded library
  std::vector<std::string> providers;  ///< what its fi_getinfo offers, sorted
  std::string libfabric_error;         ///< where none loaded: each place searched, why, and what to install
  std::string hwloc_version;           ///< the API version of the hwloc library loaded
  std::string pmix_version;            ///< of the libpmix loaded at run time; "" where none loads (or built without
                                       ///< PMIx's headers)
  bool device_buffers = false;         ///< built with the CUDA path (CUDA IPC, device kernels); else CUDA memory is
                                       ///< staged through host memory by the caller (the torch binding copies)
};

/// Loads libfabric where no communicator has yet (its provider scan, a tenth of a second); reports rather than
/// throws what it cannot find. Thread-safe.
HIERCOLL_API RuntimeReport runtime_report();

}  // namespace hiercoll
