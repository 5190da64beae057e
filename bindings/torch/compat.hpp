#pragma once
// Everything that differs between the torch releases hiercoll builds against (2.4 and newer) lives here.
// CI builds against the version pinned in requirements-torch.txt; the guards below mark the c10d::Backend
// virtuals that later releases added, so older ones still compile without them.
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#define HIERCOLL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(HIERCOLL_TORCH_AT_LEAST(2, 4), "hiercoll's torch backend needs torch 2.4 or newer");

// The releases that added each virtual were read from the Backend.hpp of every release from 2.4 to 2.15, and
// scripts/dev/torch-compat-check compiles against 2.4 and the newest.
// Backend::getError, abort, shutdown, supportsCoalescing (2.7).
#define HIERCOLL_TORCH_HAS_BACKEND_LIFECYCLE HIERCOLL_TORCH_AT_LEAST(2, 7)
// Backend::split(store, ranks, options), which ProcessGroup::split_group and DeviceMesh call; getBackendOptions and
// setTimeout became virtual in the same release (2.9).
#define HIERCOLL_TORCH_HAS_BACKEND_SPLIT HIERCOLL_TORCH_AT_LEAST(2, 9)
// Backend::gather_into_tensor (dist.gather_single / gather_into_tensor): 2.14 added it, forwarding to nothing.
#define HIERCOLL_TORCH_HAS_GATHER_SINGLE HIERCOLL_TORCH_AT_LEAST(2, 14)

// The canonical `_single` names (all_gather_single, reduce_scatter_single, all_to_all_single and their coalesced
// forms), with the old names (_allgather_base, ...) kept as forwarding aliases: the release that brought them also
// brought the forwarding guard macro, so its presence is the test. gather_single joined them in 2.15.
#ifdef C10D_BACKEND_FORWARDING_GUARD
#define HIERCOLL_TORCH_HAS_SINGLE_NAMES 1
#else
#define HIERCOLL_TORCH_HAS_SINGLE_NAMES 0
#endif
#define HIERCOLL_TORCH_HAS_GATHER_SINGLE_NAME (HIERCOLL_TORCH_HAS_SINGLE_NAMES && HIERCOLL_TORCH_AT_LEAST(2, 15))
// Backend::shrink (dist.shrink_group) and merge: present in 2.11, absent in 2.4 (the releases between were not
// read), so the guard is the first release known to have them.
#define HIERCOLL_TORCH_HAS_SHRINK HIERCOLL_TORCH_AT_LEAST(2, 11)
#ifdef C10D_BACKEND_HAS_RECONFIGURE
#define HIERCOLL_TORCH_HAS_RECONFIGURE 1
#else
#define HIERCOLL_TORCH_HAS_RECONFIGURE 0
#endif
// Completion and abort hooks (torch's flight recorder is built on them) and the reconfigure API: Backend.hpp's own
// feature macros say whether the release has them. C10D_BACKEND_HAS_HOOKS came in 2.14 with a first hook API
// (ProcessGroup's pre/post hooks, Work without a completion key) and kept its name when 2.15 replaced it with the
// completion hooks used here; building the 2.14 adapter (scripts/release/wheels all) is what showed it.
#if defined(C10D_BACKEND_HAS_HOOKS) && HIERCOLL_TORCH_AT_LEAST(2, 15)
#define HIERCOLL_TORCH_HAS_HOOKS 1
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#else
#define HIERCOLL_TORCH_HAS_HOOKS 0
#endif

// `override` on methods older releases do not declare virtual (they stay plain methods there).
#if HIERCOLL_TORCH_HAS_BACKEND_LIFECYCLE
#define HIERCOLL_OVERRIDE_SINCE_2_7 override
#else
#define HIERCOLL_OVERRIDE_SINCE_2_7
#endif
#if HIERCOLL_TORCH_HAS_BACKEND_SPLIT
#define HIERCOLL_OVERRIDE_SINCE_2_9 override
#else
#define HIERCOLL_OVERRIDE_SINCE_2_9
#endif

// Backend::isInitialized (2.15; 2.14 has reconfigure without it).
#if HIERCOLL_TORCH_AT_LEAST(2, 15)
#define HIERCOLL_OVERRIDE_SINCE_2_15 override
#else
#define HIERCOLL_OVERRIDE_SINCE_2_15
#endif

#if HIERCOLL_TORCH_HAS_SINGLE_NAMES
#define HIERCOLL_OVERRIDE_SINGLE override
#else
#define HIERCOLL_OVERRIDE_SINGLE
#endif
#if HIERCOLL_TORCH_HAS_GATHER_SINGLE_NAME
#define HIERCOLL_OVERRIDE_GATHER_SINGLE override
#else
#define HIERCOLL_OVERRIDE_GATHER_SINGLE
#endif

namespace hiercoll_torch::compat {
using BackendBase = c10d::Backend;
}  // namespace hiercoll_torch::compat
