"""python -m hiercoll_torch.build_adapter: builds hiercoll's torch adapter for a torch release, here and now.

The adapter is the torch-facing half of hiercoll (the c10d Backend and its Python module, _C); the core, libhiercoll,
comes from the `hiercoll` wheel and does not depend on torch. An adapter is valid for one torch minor release and one
Python: the released hiercoll-torch wheel carries one per supported release (scripts/release/wheels builds them with
this very module), and import picks the one for the running torch. For any other torch this builds one from the
sources the wheel carries, with a C++ compiler and nothing else: torch's headers and libraries come from its wheel,
hiercoll's from the `hiercoll` wheel, Python's from the interpreter or, where its headers are not installed, from
the copy the wheel carries. No CMake, no -dev package.

    python -m hiercoll_torch.build_adapter                 # for the torch this Python imports; where import finds it
    python -m hiercoll_torch.build_adapter --torch-root DIR --out DIR    # an unpacked torch wheel's torch/ (release)

The result goes into this package's _adapters/ where it is writable, else ~/.cache/hiercoll/adapters/ (or
$HIERCOLL_TORCH_ADAPTERS); import looks in both. Compiler: $CXX, else c++ / g++ on PATH.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

_PACKAGE = os.path.dirname(os.path.abspath(__file__))

try:
    from ._names import adapter_name, python_tag, user_adapter_root
except ImportError:  # run as a script from a checkout (scripts/release/wheels), not as part of the package
    from _names import adapter_name, python_tag, user_adapter_root


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _torch_root_of_this_python():
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("build_adapter: this Python has no torch installed (pip install torch), and no --torch-root")
    return list(spec.submodule_search_locations)[0]


class TorchRelease:
    """What an adapter must be compiled with to match one torch build, read from its files (torch is not imported:
    the release script builds against unpacked wheels whose CUDA libraries are not installed)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", _read(os.path.join(root, "version.py")), re.M)
        if not match:
            raise SystemExit(f"build_adapter: {root}/version.py names no __version__")
        self.version = match.group(1)
        config = _read(os.path.join(root, "share", "cmake", "Torch", "TorchConfig.cmake"))
        # torch <= 2.6 wheels were built with the old libstdc++ string ABI and say so here; later ones do not.
        self.cxx11_abi = 0 if "_GLIBCXX_USE_CXX11_ABI=0" in config else 1
        # The standard ATen itself demands (ATen.h refuses to compile below it: C++17 up to 2.13, C++20 from 2.14).
        aten = _read(os.path.join(root, "include", "ATen", "ATen.h"))
        needed = re.search(r"__cplusplus < (\d+)L", aten)
        self.std = "c++20" if needed and int(needed.group(1)) >= 202002 else "c++17"
        lib = os.path.join(root, "lib")
        self.cuda = os.path.exists(os.path.join(lib, "libc10_cuda.so"))
        targets = _read(os.path.join(root, "share", "cmake", "Caffe2", "Caffe2Targets.cmake"))
        self.defines = []
        for target in ["torch_cpu"] + (["torch_cuda"] if self.cuda else []):
            block = re.search(r"set_target_properties\(%s PROPERTIES(.*?)\n\)" % target, targets, re.S)
            found = block and re.search(r'INTERFACE_COMPILE_DEFINITIONS "([^"]*)"', block.group(1))
            if found:
                self.defines += [d for d in found.group(1).split(";") if d and "$<" not in d and d not in self.defines]

    def pybind11_flags(self):
        """pybind11 shares its type registry between modules (the adapter's create_backend takes torch's Store) only
        when their internals ids agree. pybind11 2.x builds the id from the compiler's C++ ABI version, which
        torch <= 2.6 fixed at build time (torch's cpp_extension passes the same -D flags); pybind11 3 (torch 2.7
        on) builds it from the library's ABI alone. Read from the id libtorch_python was built with."""
        with open(os.path.join(self.root, "lib", "libtorch_python.so"), "rb") as f:
            found = re.search(rb"__pybind11_internals_v\d+(_[a-z]+)(_[a-z]+)(_cxxabi\d+)__", f.read())
        if not found:
            return []
        return [f'-DPYBIND11_{name}="{value.decode()}"'
                for name, value in zip(("COMPILER_TYPE", "STDLIB", "BUILD_ABI"), found.groups())]

    def cuda_include(self, compiler):
        """The CUDA runtime's headers c10/cuda needs: the NVIDIA runtime wheel torch installed beside it, else a
        CUDA Toolkit; the first whose cuda_runtime_api.h preprocesses (some runtime wheels ship it without the crt/
        headers it includes). None where none does: the adapter then stages CUDA tensors through host memory."""
        site = os.path.dirname(self.root)
        candidates = [os.path.join(site, "nvidia", name, "include") for name in ("cu13", "cuda_runtime")]
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if home:
                candidates.append(os.path.join(home, "include"))
        for path in candidates:
            if not os.path.exists(os.path.join(path, "cuda_runtime_api.h")):
                continue
            probe = subprocess.run(compiler + ["-E", "-x", "c++", "-isystem", path, "-o", os.devnull, "-"],
                                   input="#include <cuda_runtime_api.h>\n", text=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if probe.returncode == 0:
                return path
        return None


def _sources():
    """The adapter's sources: the wheel's copy (_kit/src), or the checkout this module sits in."""
    for src in (os.path.join(_PACKAGE, "_kit", "src"), os.path.dirname(_PACKAGE)):
        if os.path.exists(os.path.join(src, "process_group.cpp")):
            return src
    raise SystemExit(f"build_adapter: the adapter's sources are not in {_PACKAGE}/_kit/src (a broken install?)")


def _python_include():
    include = sysconfig.get_paths()["include"]
    if os.path.exists(os.path.join(include, "Python.h")):
        return include
    kit = os.path.join(_PACKAGE, "_kit", "python", python_tag())
    if os.path.exists(os.path.join(kit, "Python.h")):
        return kit
    raise SystemExit(f"build_adapter: no Python.h for {python_tag()} in {include} or in this package's kit; "
                     "install Python's headers (Debian/Ubuntu: python3-dev, Amazon Linux: python3-devel)")


def _glibcxx_floor():
    for path in (os.path.join(_PACKAGE, "_kit", "glibcxx_floor.h"),
                 os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(_PACKAGE))), "cmake", "glibcxx_floor.h")):
        if os.path.exists(path):
            return path
    return None


def _compiler():
    if os.environ.get("CXX"):
        return shlex.split(os.environ["CXX"])
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path:
            return [path]
    raise SystemExit("build_adapter: no C++ compiler (set CXX, or install one: Debian/Ubuntu g++, "
                     "Amazon Linux gcc-c++)")


def _core(args):
    """(include dir, link arguments, device path built in?) of the hiercoll core the adapter links."""
    if args.core_static:
        # An old-ABI torch: the core compiled with the same string ABI, linked into the adapter and hidden there.
        prefix = os.path.abspath(args.core_prefix)
        link = ["-Wl,--whole-archive", args.core_static, "-Wl,--no-whole-archive", "-Wl,--exclude-libs,ALL"]
        link += shlex.split(args.core_static_libs or "")
        return os.path.join(prefix, "include"), link, args.core_cuda
    if args.core_prefix:
        prefix = os.path.abspath(args.core_prefix)
        include, libdir, cuda = os.path.join(prefix, "include"), os.path.join(prefix, "lib"), args.core_cuda
    else:
        try:
            import hiercoll
        except ImportError:
            raise SystemExit("build_adapter: the hiercoll core is not installed (pip install hiercoll)")
        include, libdir = hiercoll.include_dir(), hiercoll.library_dir()
        cuda = hiercoll.runtime_report()["device_buffers"]
    rpath = args.rpath if args.rpath is not None else libdir
    return include, [f"-L{libdir}", "-lhiercoll", f"-Wl,-rpath,{rpath}"], cuda


def build(args):
    torch = TorchRelease(args.torch_root or _torch_root_of_this_python())
    if torch.cxx11_abi == 0 and not args.core_static:
        # The core wheel's library speaks the new ABI through its C++ API: an adapter linked to it would fail at
        # import with an undefined symbol, or worse. The released adapters for 2.4-2.6 carry their own core.
        raise SystemExit(f"build_adapter: torch {torch.version} uses the old C++ string ABI "
                         "(_GLIBCXX_USE_CXX11_ABI=0), which the hiercoll core wheel does not: its adapter needs a core "
                         "built with that ABI (--core-static; scripts/release/wheels builds one from a checkout)")
    name = adapter_name(torch.version)
    out = args.out or (os.path.join(_PACKAGE, "_adapters") if os.access(os.path.join(_PACKAGE, "_adapters"), os.W_OK)
                       else user_adapter_root())
    out = os.path.join(out, name)
    src = _sources()
    core_include, core_link, core_cuda = _core(args)
    compiler = _compiler()
    cuda_include = torch.cuda_include(compiler) if torch.cuda and core_cuda else None
    ext_suffix = sysconfig.get_config_var("EXT_SUFFIX")

    flags = ["-O2", "-fPIC", f"-std={torch.std}", f"-D_GLIBCXX_USE_CXX11_ABI={torch.cxx11_abi}",
             "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
    flags += [f"-D{d}" for d in torch.defines]
    flags += [f'-DHIERCOLL_TORCH_BUILT_FOR="{torch.version}"'] + torch.pybind11_flags()
    if cuda_include:
        flags += ["-DHIERCOLL_TORCH_CUDA", "-isystem", cuda_include]
    floor = _glibcxx_floor()
    if floor:
        flags += ["-include", floor]
    flags += ["-I", src, "-I", core_include]
    for include in (os.path.join(torch.root, "include"),
                    os.path.join(torch.root, "include", "torch", "csrc", "api", "include"), _python_include()):
        flags += ["-isystem", include]

    units = sorted(f for f in os.listdir(src) if f.endswith(".cpp"))
    print(f"build_adapter: {name} for torch {torch.version} ({torch.root}), {python_tag()}, "
          f"C++ string ABI {torch.cxx11_abi}, {torch.std}, CUDA tensors "
          f"{'in place' if cuda_include else 'staged through host memory'}; {len(units)} files with "
          f"{' '.join(compiler)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hiercoll-adapter-") as work:
        def compile_one(unit):
            # The module's own symbols stay visible (PyInit__C, and pybind11's type records other modules read).
            visibility = ["-fvisibility=default"] if unit == "module.cpp" else []
            obj = os.path.join(work, unit + ".o")
            command = compiler + flags + visibility + ["-c", os.path.join(src, unit), "-o", obj]
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{unit}:\n{' '.join(shlex.quote(c) for c in command)}\n{result.stdout[-8000:]}")
            return obj

        jobs = args.jobs or os.cpu_count() or 1
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            try:
                objects = list(pool.map(compile_one, units))
            except RuntimeError as e:
                raise SystemExit(f"build_adapter: compiling failed: {e}")
        lib = os.path.join(torch.root, "lib")
        torch_libs = ["-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"] + (["-lc10_cuda"] if cuda_include else [])
        staged = os.path.join(work, "_C" + ext_suffix)
        command = compiler + ["-shared", "-o", staged] + objects + core_link + [f"-L{lib}"] + torch_libs
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise SystemExit(f"build_adapter: linking failed:\n{' '.join(command)}\n{result.stdout[-8000:]}")
        os.makedirs(out, exist_ok=True)
        shutil.move(staged, os.path.join(out, "_C" + ext_suffix))
    with open(os.path.join(out, "adapter.json"), "w") as f:
        json.dump({"torch": torch.version, "python": python_tag(), "cxx11_abi": torch.cxx11_abi,
                   "cuda_in_place": bool(cuda_include), "core": "static" if args.core_static else "shared"}, f)
    print(f"build_adapter: {out}/_C{ext_suffix}")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hiercoll_torch.build_adapter", description=__doc__.splitlines()[0])
    parser.add_argument("--torch-root", help="a torch package directory (default: this Python's torch, not imported)")
    parser.add_argument("--out", help="directory to put <torch_X_Y>/_C*.so in (default: see above)")
    parser.add_argument("--core-prefix", help="an installed hiercoll core (include/, lib/) instead of the wheel's")
    parser.add_argument("--core-cuda", action="store_true", help="with --core-prefix: the core has the device path")
    parser.add_argument("--core-static", help="link this static core (an old-ABI build) into the adapter")
    parser.add_argument("--core-static-libs", help="the static core's own link arguments")
    parser.add_argument("--rpath", help="where the adapter finds libhiercoll at run time (default: where it is now)")
    parser.add_argument("-j", "--jobs", type=int, help="compilers run at once (default: one per CPU)")
    build(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
