#!/usr/bin/env bash
# Every GPU check in one place, for the device machine (torch, nvcc, NCCL and CMake, but no libfabric,
# hwloc or Catch2: those travel as Debian packages in .debs/, unpacked into .debs/root, never into /).
#
#   scripts/gpu-check.sh prepare   here (Debian, network): download the .deb files into .debs/
#   scripts/gpu-check.sh run       on the GPU machine (carry .debs): build with HIERCOLL_WITH_CUDA=ON, run the
#                                  CUDA tests and the kernel bandwidth benchmark; results under ${OUT:-gpu-out}
#
# With the device tool: run(command="scripts/gpu-check.sh run", carry=[".debs"]).
set -euo pipefail
cd "$(dirname "$0")/.."
debs=.debs
packages=(libfabric1 libfabric-dev libhwloc15 libhwloc-dev catch2 libibverbs1 librdmacm1 libpsm2-2
          libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libltdl7 ibverbs-providers)

prepare() {
  mkdir -p "$debs"
  (cd "$debs" && apt-get download "${packages[@]}")
  ls -1 "$debs"/*.deb | wc -l | xargs echo "gpu-check: .deb files in $debs:"
}

run() {
  local out=${OUT:-gpu-out} root=$PWD/$debs/root
  mkdir -p "$out" "$root"
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$root"; done
  # Debian's .pc files say prefix=/usr: the sysroot makes pkg-config point into the unpacked tree.
  export PKG_CONFIG_PATH=$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$root
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DHIERCOLL_WITH_CUDA=ON -DCMAKE_PREFIX_PATH="$root/usr" \
        -DHIERCOLL_WITH_TORCH="${WITH_TORCH:-ON}" 2>&1 | tee "$out/configure.txt"
  cmake --build build-gpu -j "$(nproc)" 2>&1 | tail -50 | tee "$out/build.txt"
  (cd build-gpu && ctest -L cuda --output-on-failure) 2>&1 | tee "$out/ctest-cuda.txt"
  build-gpu/bench/hiercoll_cuda_reduce_bandwidth 256 2>&1 | tee "$out/reduce-bandwidth.txt"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run" >&2; exit 2 ;;
esac
