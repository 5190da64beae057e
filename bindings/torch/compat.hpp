#pragma once
// Everything that differs between the torch releases hiercoll builds against (2.4 and newer) lives here.
// CI builds against the version pinned in requirements-torch.txt; the guards below mark the c10d::Backend
// virtuals that later releases added, so older ones still compile without them.
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#define HIERCOLL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(HIERCOLL_TORCH_AT_LEAST(2, 4), "hiercoll's torch backend needs torch 2.4 or newer");

// Backend::getError, abort, shutdown and supportsCoalescing.
#define HIERCOLL_TORCH_HAS_BACKEND_LIFECYCLE HIERCOLL_TORCH_AT_LEAST(2, 6)
// Backend::split(store, ranks, options), which ProcessGroup::split_group and DeviceMesh call.
#define HIERCOLL_TORCH_HAS_BACKEND_SPLIT HIERCOLL_TORCH_AT_LEAST(2, 8)

#if HIERCOLL_TORCH_HAS_BACKEND_LIFECYCLE
#define HIERCOLL_OVERRIDE_SINCE_2_6 override
#else
#define HIERCOLL_OVERRIDE_SINCE_2_6
#endif

namespace hiercoll_torch::compat {
using BackendBase = c10d::Backend;
}  // namespace hiercoll_torch::compat
