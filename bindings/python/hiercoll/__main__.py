"""python -m hiercoll [--cflags | --libs | --cmake-dir | --include-dir | --library-dir]

With no option: the version, where the library is, and what it finds on this host (libfabric and its providers,
hwloc, PMIx, CUDA), as hiercoll_launch's ranks would see it."""
import argparse
import sys

import hiercoll


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hiercoll", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cflags", action="store_true", help="compiler flags for the headers")
    group.add_argument("--libs", action="store_true", help="linker flags for libhiercoll (with an rpath to it)")
    group.add_argument("--cmake-dir", action="store_true", help="hiercoll_DIR for find_package(hiercoll)")
    group.add_argument("--include-dir", action="store_true")
    group.add_argument("--library-dir", action="store_true")
    args = parser.parse_args(argv)
    if args.cflags:
        print(f"-I{hiercoll.include_dir()}")
    elif args.libs:
        print(" ".join(hiercoll.link_flags()))
    elif args.cmake_dir:
        print(hiercoll.cmake_dir())
    elif args.include_dir:
        print(hiercoll.include_dir())
    elif args.library_dir:
        print(hiercoll.library_dir())
    else:
        r = hiercoll.runtime_report()
        fabric = r["libfabric"]
        print(f"hiercoll {hiercoll.__version__}: {hiercoll.library_path()} (hiercoll_version() {r['version']})")
        if fabric["loaded"]:
            print(f"libfabric: {fabric['path']}, version {fabric['version']}, providers "
                  f"{', '.join(fabric['providers']) or 'none'}")
        else:
            print("libfabric: none loaded; jobs on one host still run (provider unix)\n  " +
                  fabric["error"].replace("\n", "\n  "))
        print(f"hwloc: API {r['hwloc']}")
        print(f"PMIx: {r['pmix'] or 'no libpmix.so.2 loads (mpirun and srun --mpi=pmix rendezvous need it)'}")
        print("CUDA: " + ("device buffers in place (the device path is built in)" if r["device_buffers"]
                          else "no device path in this build: device buffers must be staged through host memory"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
