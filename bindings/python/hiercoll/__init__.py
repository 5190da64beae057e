"""hiercoll, the core: the collective library for C, C++ and any framework, with no torch in it.

The wheel holds the library and what builds against it, beside this file:

    lib/libhiercoll.so              the library (C API: include/hiercoll/hiercoll.h; C++: include/hiercoll/*.hpp)
    lib/cmake/hiercoll/             find_package(hiercoll) -> hiercoll::hiercoll
    include/hiercoll/               the headers
    bin/hiercoll_launch             starts N ranks of a program on this host (also on PATH as `hiercoll_launch`)

    cc prog.c $(python -m hiercoll --cflags) $(python -m hiercoll --libs)
    cmake -Dhiercoll_DIR=$(python -m hiercoll --cmake-dir) ...

libfabric and PMIx are not in the wheel: the library loads them at run time from the host (docs/install.md).
The torch.distributed backend is the hiercoll-torch package, which depends on this one.
"""
import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def library_dir():
    """The directory of libhiercoll.so."""
    return os.path.join(_HERE, "lib")


def library_path():
    return os.path.join(library_dir(), "libhiercoll.so")


def include_dir():
    return os.path.join(_HERE, "include")


def cmake_dir():
    """For find_package(hiercoll): pass as hiercoll_DIR, or its parent's parent as CMAKE_PREFIX_PATH."""
    return os.path.join(library_dir(), "cmake", "hiercoll")


def link_flags():
    """Linker arguments for a program using libhiercoll from here: the library, a run path to it, and where its own
    dependencies are (auditwheel puts hwloc in hiercoll.libs/, which libhiercoll finds at run time by its run path;
    the linker has to be told)."""
    flags = [f"-L{library_dir()}", f"-Wl,-rpath,{library_dir()}", "-lhiercoll"]
    bundled = os.path.join(os.path.dirname(_HERE), "hiercoll.libs")
    if os.path.isdir(bundled):
        flags.append(f"-Wl,-rpath-link,{bundled}")
    return flags


def launcher_path():
    return os.path.join(_HERE, "bin", "hiercoll_launch")


_library = None


def load():
    """libhiercoll, loaded once into this process (its symbols global, so that an adapter built against it, such as
    hiercoll-torch's, finds this copy), as a ctypes library."""
    global _library
    if _library is None:
        library = ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL)
        for name in ("hiercoll_version", "hiercoll_runtime_report", "hiercoll_last_error"):
            getattr(library, name).restype = ctypes.c_char_p
        _library = library
    return _library


def library_version():
    """hiercoll_version() of the library in this wheel (equal to __version__: both come from one VERSION file)."""
    return load().hiercoll_version().decode()


def runtime_report():
    """What the library finds on this host, as a dict: version, libfabric (loaded, path, version, providers, error),
    hwloc, pmix, device_buffers (built with the CUDA path)."""
    import json

    library = load()
    text = library.hiercoll_runtime_report()
    if text is None:
        raise RuntimeError("hiercoll_runtime_report: " + library.hiercoll_last_error().decode())
    return json.loads(text.decode())


from ._version import __version__  # noqa: E402
