#pragma once
// libfabric, loaded at run time and never linked: each host keeps its own (AWS's EFA installer puts the one with the
// efa provider under /opt/amazon/efa, beside the distribution's), a wheel cannot know which, and a bundled copy would
// take the NIC from the one the host's other libraries (aws-ofi-nccl) use. hiercoll calls six of libfabric's exports;
// everything else it uses (fi_domain, fi_tsend, fi_cq_read, ...) is an inline call through the operation tables of
// the objects those return, which needs no symbol.
//
// The entry points are taken at the symbol versions whose structures rdma/fabric.h describes (libfabric keeps every
// old version of an export, converting to its layout), so a newer library on the host serves this build as it is.
#include <rdma/fabric.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hiercoll::transport {

/// The oldest libfabric hiercoll runs on: 1.11, the oldest its build accepts (CMakeLists.txt).
constexpr uint32_t kOldestLibfabric = FI_VERSION(1, 11);

struct Libfabric {
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags, const fi_info* hints,
                 fi_info** info) = nullptr;
  void (*freeinfo)(fi_info* info) = nullptr;
  fi_info* (*dupinfo)(const fi_info* info) = nullptr;  ///< dupinfo(nullptr) allocates, as fi_allocinfo
  int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context) = nullptr;
  uint32_t (*version)() = nullptr;
  const char* (*strerror)(int errnum) = nullptr;
  std::string path;  ///< the file loaded, as the loader resolved it

  /// The API hiercoll asks for (fi_getinfo's version): the headers' where the library is as new, else the library's
  /// own. Asking for the headers' version made a library older than them refuse every provider ("Function not
  /// implemented": a container built on a newer EFA installer, run on an older host). Not simply the oldest: a
  /// provider enables what the version asked for promises (EFA offers FI_HMEM and device RDMA from 1.18).
  uint32_t api() const {
    const uint32_t headers = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
    return version() < headers ? version() : headers;
  }
};

/// The process's libfabric, loaded by the first call (thread-safe; never unloaded): the file HIERCOLL_LIBFABRIC
/// names when it is set (that one only), else the first that loads of /opt/amazon/efa/lib64/libfabric.so.1,
/// /opt/amazon/efa/lib/libfabric.so.1 and libfabric.so.1 on the loader's search path. Throws FabricError naming each
/// place searched, why it failed and what to install; the same error on every later call.
const Libfabric& libfabric();

/// Whether libfabric() loads (it is then loaded); never throws.
bool libfabric_available();

struct LibfabricReport {
  bool loaded = false;
  std::string path, version;           ///< the file and its "major.minor", where loaded
  std::vector<std::string> providers;  ///< sorted, each once
  std::string error;                   ///< libfabric()'s error, where none loaded
};

/// Loads libfabric where nothing has yet; never throws.
LibfabricReport libfabric_report();

/// The EFA NICs under `sysfs_class` (the kernel's /sys/class/infiniband): devices whose driver is efa, sorted.
std::vector<std::string> efa_devices(const std::string& sysfs_class = "/sys/class/infiniband");

/// What to say when a host has EFA NICs (`devices`) but the libfabric loaded (`path`, offering `providers`) has no
/// efa provider: every transfer between hosts would then take tcp, slowly and silently (aws-ofi-nccl users' most
/// common surprise). "" where there is nothing to say.
std::string efa_mismatch(const std::vector<std::string>& devices, const std::vector<std::string>& providers,
                         const std::string& path);

/// A libfabric version (FI_VERSION) as "major.minor".
std::string fabric_version_text(uint32_t version);

/// fi_strerror through the loaded library, or the number where none is loaded.
std::string fabric_strerror(int errnum);

/// "<call> failed: <fi_strerror> (<rc>)" for a libfabric call that returned `rc` (negative).
std::string fabric_call_failed(const std::string& call, ssize_t rc);

/// fi_close(object), where object is not null; a refusal (which leaks what the object held) is logged, not thrown,
/// as closing runs in destructors. `what` names the call in the warning ("fi_close(endpoint)").
void close_fabric_object(fid* object, const char* what);

/// Gives SIGSEGV, SIGTERM, ... back their default disposition where a library loaded with libfabric's providers
/// installed a handler of its own (foreign_handlers.cpp); called after libfabric loads.
void restore_default_dispositions();

}  // namespace hiercoll::transport
