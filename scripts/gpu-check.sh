#!/usr/bin/env bash
# Every GPU check in one place, for the device machine (torch, nvcc, NCCL and CMake, but no libfabric,
# hwloc or Catch2: those travel as Debian packages in .debs/, unpacked into .debs/root, never into /).
#
#   scripts/gpu-check.sh prepare   here (Debian, network): download the .deb files into .debs/
#   scripts/gpu-check.sh run       on the GPU machine (carry .debs): build with HIERCOLL_WITH_CUDA=ON, run the
#                                  CUDA tests (C++ and torch), the kernel bandwidth benchmark and allreduce_perf
#                                  on device buffers (hiercoll and NCCL); results under ${OUT:-gpu-out}
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
  export FI_PROVIDER_PATH=$root/usr/lib/x86_64-linux-gnu/libfabric
  export HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_FABRIC_IFACE=lo
  local status=0
  note() { echo "gpu-check: $*" | tee -a "$out/summary.txt"; }
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DHIERCOLL_WITH_CUDA=ON -DCMAKE_PREFIX_PATH="$root/usr" \
        -DHIERCOLL_WITH_TORCH="${WITH_TORCH:-ON}" 2>&1 | tee "$out/configure.txt"
  if ! cmake --build build-gpu -j "$(nproc)" > "$out/build.txt" 2>&1; then
    tail -50 "$out/build.txt"
    note "build FAILED (see build.txt)"
    return 1
  fi

  # 1. CUDA tests: device kernels vs host kernels; every collective on device buffers, 2-4 ranks on the GPU.
  if (cd build-gpu && ctest -L cuda --output-on-failure) > "$out/ctest-cuda.txt" 2>&1; then
    if grep -q "(Skipped)" "$out/ctest-cuda.txt"; then note "ctest -L cuda: SKIPPED (no GPU)"; status=1
    else note "ctest -L cuda passed"; fi
  else note "ctest -L cuda FAILED (see ctest-cuda.txt)"; status=1; fi
  # 2. The torch backend on CUDA tensors and DDP on a CUDA model (2 and 4 processes sharing the GPU), with the
  #    Python the binding was built for; pytest if it has it, else the same workers through test/torch/launch.py.
  local py
  py=$(sed -n 's/^-- hiercoll_torch: building for torch .* with //p' "$out/configure.txt" | tail -1)
  if [ -n "$py" ] && [ -d build-gpu/python/hiercoll_torch ]; then
    if PYTHONPATH=$PWD/build-gpu/python:$PWD/test/torch "$py" - > "$out/torch-cuda.txt" 2>&1 <<'PY'
import sys
import torch
from launch import run_ranks
if not torch.cuda.is_available():
    print("SKIPPED: torch sees no CUDA device")
    sys.exit(77)
for size in (2, 4):
    outputs = run_ranks(size, "worker_cuda.py", timeout=900)
    print(f"--- {size} processes"); print("\n".join(outputs))
    if not all(" 0 failed" in out for out in outputs):
        sys.exit(1)
PY
    then note "torch CUDA tests passed"
    else note "torch CUDA tests FAILED or SKIPPED (see torch-cuda.txt)"; status=1; fi
  else
    note "torch binding not built (see configure.txt): torch CUDA tests not run"
  fi
  if ! nvidia-smi -L > /dev/null 2>&1; then
    note "no GPU here: benchmarks not run"
    return 1
  fi
  # 3. Kernel bandwidth as a fraction of a device-to-device copy, same run, same buffers.
  build-gpu/bench/hiercoll_cuda_reduce_bandwidth 256 > "$out/reduce-bandwidth.txt" 2>&1 || status=1
  cat "$out/reduce-bandwidth.txt"
  # 4. Allreduce on device buffers (nccl-tests conventions): hiercoll on 1, 2 and 4 ranks sharing the GPU,
  #    NCCL beside it where it runs (NCCL refuses two ranks on one GPU, so 1 rank per GPU present).
  local gpus
  gpus=$(nvidia-smi -L | wc -l)
  for n in 1 2 4; do
    build-gpu/tools/hiercoll_launch -n "$n" --timeout 600 -- build-gpu/bench/allreduce_perf --backend hiercoll-cuda \
      -b 8K -e 256M -f 4 -n 20 -w 5 > "$out/allreduce-hiercoll-cuda-$n.txt" 2>&1 || status=1
  done
  for n in $(printf '%s\n' 1 "$gpus" | sort -un); do
    build-gpu/tools/hiercoll_launch -n "$n" --timeout 600 -- build-gpu/bench/allreduce_perf --backend nccl \
      -b 8K -e 256M -f 4 -n 20 -w 5 > "$out/allreduce-nccl-$n.txt" 2>&1 || true
  done
  tail -n 4 "$out"/allreduce-*.txt
  return $status
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run" >&2; exit 2 ;;
esac
