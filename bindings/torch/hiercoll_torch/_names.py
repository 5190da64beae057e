"""Where adapters live and what they are called: shared by the loader (_adapter.py) and the builder
(build_adapter.py), which also runs as a plain script, so this imports nothing of the package."""
import os
import sys


def adapter_name(torch_version):
    """'2.15.0+cu130' -> 'torch_2_15': adapters are per torch minor release."""
    major, minor = torch_version.split("+")[0].split(".")[:2]
    return f"torch_{int(major)}_{int(minor)}"


def python_tag():
    """'cp311': an adapter is a CPython extension for one Python minor."""
    return f"{sys.implementation.name[:2]}{sys.version_info.major}{sys.version_info.minor}"


def user_adapter_root():
    """Where adapters built on this machine go when the package is not writable (and where import looks next)."""
    root = os.environ.get("HIERCOLL_TORCH_ADAPTERS")
    if root:
        return root
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "hiercoll", "adapters", python_tag())
