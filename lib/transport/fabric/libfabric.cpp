// libfabric loaded at run time (libfabric.hpp).
#include "transport/fabric/libfabric.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>
#include <vector>

#include "base/dynamic_library.hpp"
#include "base/log.hpp"
#include "base/settings.hpp"
#include "base/text.hpp"
#include "hiercoll/errors.hpp"

#if FI_MAJOR_VERSION != 1
// The entry points below are taken at the versions libfabric 1.x's headers describe; a 2.x fabric.h may change
// fi_info's layout under a new symbol version: check libfabric.map.in before raising this.
#error "hiercoll's libfabric loader knows the symbol versions of libfabric 1.x only"
#endif

namespace hiercoll::transport {
namespace {

// Where libfabric is looked for when HIERCOLL_LIBFABRIC is unset: AWS's EFA installer's (the one with the efa
// provider, which the distribution's libfabric may lack), then whatever the dynamic loader finds.
const char* const kSearch[] = {"/opt/amazon/efa/lib64/libfabric.so.1", "/opt/amazon/efa/lib/libfabric.so.1",
                               "libfabric.so.1"};

// A symbol at the version this build's headers bind (what a link against libfabric 1.11-1.2x records), or the
// unversioned symbol of a library built without a version script.
template <typename Function>
bool bind(void* handle, const char* name, const char* version, Function& out) {
  void* symbol = dlvsym(handle, name, version);
  if (symbol == nullptr) symbol = dlsym(handle, name);
  out = reinterpret_cast<Function>(symbol);
  return symbol != nullptr;
}

// The providers this libfabric offers (the scan every first fi_getinfo makes anyway).
std::vector<std::string> providers(const Libfabric& lib) {
  fi_info* list = nullptr;
  if (lib.getinfo(lib.api(), nullptr, nullptr, 0, nullptr, &list) != 0 || list == nullptr) return {};
  std::set<std::string> names;
  for (const fi_info* info = list; info != nullptr; info = info->next) {
    if (info->fabric_attr && info->fabric_attr->prov_name) names.insert(info->fabric_attr->prov_name);
  }
  lib.freeinfo(list);
  return {names.begin(), names.end()};
}

std::string comma_list(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) base::append_listed(text, item);
  return text;
}

std::string provider_names(const Libfabric& lib) {
  const std::string text = comma_list(providers(lib));
  return text.empty() ? "none" : text;
}

struct Loaded {
  Libfabric lib;
  std::string error;  // "" once loaded
};

Loaded load() {
  Loaded out;
  const std::string& chosen = base::process_settings().libfabric;
  std::vector<std::string> candidates;
  if (!chosen.empty()) {
    candidates.push_back(chosen);
  } else {
    candidates.assign(std::begin(kSearch), std::end(kSearch));
  }
  std::string tried;
  for (const auto& file : candidates) {
    // RTLD_LOCAL: libfabric's symbols stay out of the global scope, where they could interpose on another copy a
    // host library (aws-ofi-nccl) loaded. RTLD_NOW: a library missing one of its own dependencies fails here, by
    // name, not at the first call.
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + std::string(chosen.empty() ? "" : "HIERCOLL_LIBFABRIC=") + (why ? why : file + ": not loaded");
      continue;
    }
    Libfabric& lib = out.lib;
    const bool complete = bind(handle, "fi_getinfo", "FABRIC_1.3", lib.getinfo) &&
                          bind(handle, "fi_freeinfo", "FABRIC_1.3", lib.freeinfo) &&
                          bind(handle, "fi_dupinfo", "FABRIC_1.3", lib.dupinfo) &&
                          bind(handle, "fi_fabric", "FABRIC_1.1", lib.fabric) &&
                          bind(handle, "fi_version", "FABRIC_1.0", lib.version) &&
                          bind(handle, "fi_strerror", "FABRIC_1.0", lib.strerror);
    if (!complete || lib.version() < kOldestLibfabric) {
      tried += "\n  " + file + ": " +
               (complete ? "libfabric " + fabric_version_text(lib.version()) + ", older than the 1.11 hiercoll needs"
                         : std::string("not a libfabric (an entry point is missing)"));
      lib = Libfabric{};
      dlclose(handle);
      continue;
    }
    lib.path = base::loaded_path(handle, file);
    restore_default_dispositions();  // libinfinipath (the psm provider's) installs its handlers as it loads
    // provider_names() runs at INFO only (the macro evaluates its text then).
    HIERCOLL_LOG(kInfo, "libfabric: " << lib.path << ", version " << fabric_version_text(lib.version())
                                      << ", providers " << provider_names(lib));
    // The provider scan only where the host has EFA NICs: there, a libfabric without efa is the one mistake that
    // costs an order of magnitude without failing anything.
    const std::vector<std::string> efa = efa_devices();
    if (!efa.empty()) {
      const std::string mismatch = efa_mismatch(efa, providers(lib), lib.path);
      if (!mismatch.empty()) HIERCOLL_LOG(kWarn, mismatch);
    }
    return out;
  }
  out.error = "libfabric could not be loaded, and hiercoll's transport between hosts needs it. Searched:" + tried +
              "\nInstall libfabric (Debian and Ubuntu: apt-get install libfabric1; Amazon Linux and EC2 instances "
              "with EFA: AWS's EFA installer, /opt/amazon/efa) or set HIERCOLL_LIBFABRIC to the path of its "
              "libfabric.so.1.";
  return out;
}

const Loaded& loaded() {
  static const Loaded once = load();
  return once;
}

}  // namespace

const Libfabric& libfabric() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw FabricError(l.error);
  return l.lib;
}

bool libfabric_available() { return loaded().error.empty(); }

std::vector<std::string> efa_devices(const std::string& sysfs_class) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sysfs_class, ec)) {
    // <device>/device/driver links to the PCI driver's directory, .../drivers/efa for an EFA NIC.
    const auto driver = std::filesystem::read_symlink(entry.path() / "device" / "driver", ec);
    if (!ec && driver.filename() == "efa") found.push_back(entry.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string efa_mismatch(const std::vector<std::string>& devices, const std::vector<std::string>& providers,
                         const std::string& path) {
  if (devices.empty() || std::find(providers.begin(), providers.end(), "efa") != providers.end()) return "";
  return "this host has EFA NICs (" + comma_list(devices) + "), but the libfabric loaded, " + path +
         ", has no efa provider: traffic between hosts will take tcp, far slower. Load the EFA installer's "
         "(/opt/amazon/efa/lib64/libfabric.so.1, searched first when HIERCOLL_LIBFABRIC is unset), or install AWS's "
         "EFA installer.";
}

std::string fabric_version_text(uint32_t version) {
  return std::to_string(FI_MAJOR(version)) + "." + std::to_string(FI_MINOR(version));
}

LibfabricReport libfabric_report() {
  LibfabricReport report;
  const Loaded& l = loaded();
  report.error = l.error;
  report.loaded = l.error.empty();
  if (report.loaded) {
    report.path = l.lib.path;
    report.version = fabric_version_text(l.lib.version());
    report.providers = providers(l.lib);
  }
  return report;
}

std::string fabric_strerror(int errnum) {
  if (libfabric_available()) return libfabric().strerror(errnum);
  return "libfabric error " + std::to_string(errnum);
}

std::string fabric_call_failed(const std::string& call, ssize_t rc) {
  return call + " failed: " + fabric_strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) + ")";
}

void close_fabric_object(fid* object, const char* what) {
  const int rc = object ? fi_close(object) : 0;
  if (rc != 0) HIERCOLL_LOG(kWarn, "fabric: " << fabric_call_failed(what, rc));
}

}  // namespace hiercoll::transport
