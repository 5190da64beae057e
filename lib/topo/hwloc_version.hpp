#pragma once
// Which hwloc this process loaded (machine.cpp holds hiercoll's hwloc calls).
#include <string>

namespace hiercoll::topo {

/// The loaded hwloc library's API version, "major.minor.patch" (hwloc_get_api_version: the interface it implements,
/// which a release keeps for several minor versions).
std::string hwloc_version();

}  // namespace hiercoll::topo
