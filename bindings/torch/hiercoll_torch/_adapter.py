"""Which compiled adapter (the extension module _C) serves the running torch, and loading it.

An adapter is built against one torch minor release and one Python (build_adapter.py). Looked for, in order:
  1. _C beside this file: a developer's build tree (CMake puts it there, built for that tree's torch);
  2. _adapters/torch_X_Y/ in this package: the ones the wheel carries, and ones build_adapter put here;
  3. $HIERCOLL_TORCH_ADAPTERS/torch_X_Y/, else ~/.cache/hiercoll/adapters/<python>/torch_X_Y/: built on this machine.
torch must be imported first: the adapter finds libtorch by the name torch loaded it under.
"""
import glob
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig

from ._names import adapter_name, python_tag, user_adapter_root

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


class AdapterError(ImportError):
    """No adapter of this install serves the running torch; the message says which exist and how to build one."""


def carried():
    """The torch releases this package has adapters for, as (major, minor), oldest first."""
    found = []
    for path in glob.glob(os.path.join(_PACKAGE, "_adapters", "torch_*_*", "_C" + _SUFFIX)):
        major, minor = os.path.basename(os.path.dirname(path)).split("_")[1:]
        found.append((int(major), int(minor)))
    return sorted(found)


def _describe(releases):
    return ", ".join(f"{major}.{minor}" for major, minor in releases) or "none"


def find(torch_version, torch_cxx11_abi):
    """(path, how, its adapter.json) of the adapter for this torch, or raises AdapterError."""
    beside = os.path.join(_PACKAGE, "_C" + _SUFFIX)
    if os.path.exists(beside):
        return beside, "the build tree's", {}
    name = adapter_name(torch_version)
    refused = []
    for root, how in ((os.path.join(_PACKAGE, "_adapters"), "this package's"),
                      (user_adapter_root(), "built on this machine")):
        path = os.path.join(root, name, "_C" + _SUFFIX)
        if not os.path.exists(path):
            continue
        try:
            with open(os.path.join(root, name, "adapter.json")) as f:
                built = json.load(f)
        except (OSError, ValueError):
            built = {}
        # The string ABI is the one thing a torch minor release does not fix by itself (2.4-2.6 shipped both).
        if "cxx11_abi" in built and int(built["cxx11_abi"]) != int(torch_cxx11_abi):
            refused.append(f"{path} (built for the C++ string ABI {built['cxx11_abi']}, torch uses "
                           f"{int(torch_cxx11_abi)})")
            continue
        return path, f"{how} ({built.get('torch', name)})", built
    python = f"{sys.implementation.name} {sys.version_info.major}.{sys.version_info.minor}"
    message = (f"hiercoll-torch has no adapter for torch {torch_version} on {python} ({python_tag()}): "
               f"this install carries adapters for torch {_describe(carried())}")
    if refused:
        message += "; refused: " + "; ".join(refused)
    message += (". Build one for this torch here, with a C++ compiler and nothing else: "
                f"`{os.path.basename(sys.executable)} -m hiercoll_torch.build_adapter` (a minute or two; "
                f"it goes to {os.path.join(_PACKAGE, '_adapters')} or {user_adapter_root()})")
    raise AdapterError(message)


def load(torch_version, torch_cxx11_abi):
    """Loads the adapter as hiercoll_torch._C and returns (module, how it was found)."""
    path, how, built = find(torch_version, torch_cxx11_abi)
    # An adapter for an old-ABI torch (2.4-2.6) carries its own core, built with that ABI and hidden inside it; the
    # others link the `hiercoll` wheel's.
    if built.get("core") != "static":
        try:
            # The core loaded with its symbols global first: the adapter then binds to this copy whatever its run
            # path says (an adapter built on this machine names where the core was then).
            import hiercoll

            hiercoll.load()
        except ImportError:
            pass  # a build tree: the adapter's run path finds the tree's libhiercoll
    loader = importlib.machinery.ExtensionFileLoader(__package__ + "._C", path)
    spec = importlib.util.spec_from_file_location(__package__ + "._C", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[__package__ + "._C"] = module
    return module, f"{how}: {path}"
