#pragma once
// Everything that differs between the torch releases hiercoll builds against lives here:
// Debian's LibTorch 1.13, where a custom backend is a c10d::ProcessGroup, and torch 2.x, where it is a
// c10d::Backend that torch wraps in a ProcessGroup itself.
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace hiercoll_torch::compat {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

}  // namespace hiercoll_torch::compat
