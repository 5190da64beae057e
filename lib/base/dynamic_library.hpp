#pragma once
// What the libraries hiercoll loads at run time (libfabric, PMIx: never linked) share: the file the loader resolved
// a name to, for the start-up log and the install check.
#include <dlfcn.h>
#include <link.h>

#include <string>

namespace hiercoll::base {

/// The path the loader resolved `handle` to ("libpmix.so.2" -> "/usr/lib/.../libpmix.so.2"), else `fallback`.
inline std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name) {
    return map->l_name;
  }
  return fallback;
}

}  // namespace hiercoll::base
