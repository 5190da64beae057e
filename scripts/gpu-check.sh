#!/usr/bin/env bash
# Every GPU check in one place, for the device machine (torch, nvcc, NCCL and CMake, but no libfabric,
# hwloc or Catch2: those travel as Debian packages in .debs/, unpacked into .debs/root, never into /).
#
#   scripts/gpu-check.sh prepare   here (Debian, network): download the .deb files into .debs/, and the ALBERT
#                                  trainer's corpus (it needs Debian's bible-kjv) as .debs/kjv.txt
#   scripts/gpu-check.sh hf        on the GPU machine: only the Hugging Face ALBERT trainer (step 6 of run)
#   scripts/gpu-check.sh exec CMD  on the GPU machine: set up and build the torch binding, then run CMD with it
#   scripts/gpu-check.sh run       on the GPU machine (carry .debs): build with HIERCOLL_WITH_CUDA=ON, run the
#                                  CUDA tests (C++ and torch), the kernel bandwidth benchmark and allreduce_perf
#                                  on device buffers (hiercoll and NCCL); results under ${OUT:-gpu-out}
#
# With the device tool (10 minutes a call, 8 files back):
#   run(command="scripts/gpu-check.sh run; tar czf $OUT/gpu.tgz -C $OUT --exclude=gpu.tgz .", carry=[".debs"])
# Each step has its own time limit; summary.txt says passed / FAILED / TIMED OUT / SKIPPED per step.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=.debs
packages=(libfabric1 libfabric-dev libhwloc15 libhwloc-dev catch2 libibverbs1 librdmacm1 libpsm2-2
          libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libltdl7 ibverbs-providers
          sentencepiece libsentencepiece0)

prepare() {
  mkdir -p "$debs"
  (cd "$debs" && apt-get download "${packages[@]}")
  [ -f "$debs/kjv.txt" ] || examples/albert_mlm/prepare-corpus "$debs/kjv.txt"
  ls -1 "$debs"/*.deb | wc -l | xargs echo "gpu-check: .deb files in $debs:"
}

# Unpacks .debs and points the build at it; defines note/step; sets out, build, status.
setup() {
  out=${OUT:-gpu-out} root=$PWD/$debs/root status=0 build=build-gpu
  mkdir -p "$out" "$root"
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$root"; done
  # Debian's .pc files say prefix=/usr: the sysroot makes pkg-config point into the unpacked tree. LIBDIR, not
  # PATH: the sysroot would also be prefixed to the machine's own .pc files (its pmix.pc made CMake fail).
  export PKG_CONFIG_LIBDIR=$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$root
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$root/usr/bin:$PATH  # spm_encode for the ALBERT trainer
  export FI_PROVIDER_PATH=$root/usr/lib/x86_64-linux-gnu/libfabric
  export HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_FABRIC_IFACE=lo
  note() { echo "gpu-check: $*" | tee -a "$out/summary.txt"; }
  # step NAME SECONDS COMMAND...: runs with a time limit (nothing may eat the device's 10-minute call), logs to
  # $out/NAME.txt, notes the outcome.
  step() {
    local name=$1 limit=$2 t0=$SECONDS rc=0
    shift 2
    timeout -k 5 "$limit" "$@" > "$out/$name.txt" 2>&1 || rc=$?
    if [ $rc = 0 ]; then note "$name passed ($((SECONDS - t0)) s)"
    elif [ $rc = 77 ]; then note "$name SKIPPED (no GPU)"; status=1
    elif [ $rc = 124 ]; then note "$name TIMED OUT after $limit s (see $name.txt)"; status=1
    else note "$name FAILED, exit $rc (see $name.txt)"; status=1; fi
    return 0
  }
  rm -f $build/CMakeCache.txt  # a warm machine keeps build-gpu: find everything afresh, build incrementally
  cmake -S . -B $build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHIERCOLL_WITH_CUDA=ON -DCMAKE_PREFIX_PATH="$root/usr" \
        -DHIERCOLL_WITH_TORCH="${WITH_TORCH:-ON}" > "$out/configure.txt" 2>&1
}

# The Python the torch binding was built for (empty when it was not configured).
torch_python() {
  sed -n 's/^-- hiercoll_torch: building for torch .* with //p' "$out/configure.txt" | tail -1
}

# The torch binding alone (the hf and exec commands need nothing else).
build_torch_binding() {
  timeout 300 cmake --build $build -j "$(nproc)" --target hiercoll_torch_ext > "$out/build.txt" 2>&1 ||
    note "torch binding build FAILED (see build.txt)"
}

# The Hugging Face ALBERT trainer (examples/albert_hf) on the GPU: ALBERT-base, bf16, one rank per GPU, hiercoll
# beside NCCL (alternated twice), then Hugging Face's Trainer on a hiercoll group.
hf_albert() {
  local py backend round gpus
  py=$(torch_python)
  gpus=$(nvidia-smi -L | wc -l)
  [ -n "$py" ] || { note "torch binding not configured: Hugging Face ALBERT not run"; status=1; return 0; }
  local run=(env PYTHONPATH=$PWD/$build/python OMP_NUM_THREADS=4 "$py" -m torch.distributed.run
             --nproc-per-node "$gpus" --master-port 29533)
  local common=(--corpus "$debs/kjv.txt" --tokenizer "$out/hf-tokenizer" --device cuda --amp bf16
                --config base --batch 32 --steps "${HF_STEPS:-150}" --log-every 50 --num-workers 4)
  for round in 1 2; do
    for backend in hiercoll nccl; do
      step "albert_hf_${backend}_$round" 150 "${run[@]}" examples/albert_hf/train.py "${common[@]}" \
        --backend $backend --out "$out/hf-$backend-$round"
      grep -h '"summary": true' "$out/albert_hf_${backend}_$round.txt" | tee -a "$out/summary.txt" || true
    done
  done
  step albert_hf_trainer 150 "${run[@]}" examples/albert_hf/train_trainer.py --corpus "$debs/kjv.txt" \
    --tokenizer "$out/hf-tokenizer" --device cuda --config base --batch 32 --steps 60 --backend hiercoll \
    --out "$out/hf-trainer"
  grep -h '"summary": true' "$out/albert_hf_trainer.txt" | cut -c1-200 | tee -a "$out/summary.txt" || true
}

run() {
  setup
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
  { g++ --version | head -1; env | grep -E '^(LD|C|CXX|CUDA)FLAGS=' || true; } > "$out/toolchain.txt"
  if ! timeout 300 cmake --build $build -j "$(nproc)" > "$out/build.txt" 2>&1; then
    note "full build FAILED (see build.txt); building the GPU checks alone"
    status=1
    timeout 200 cmake --build $build -j "$(nproc)" --target hiercoll_reduce_cuda_test hiercoll_collectives_cuda_test \
      hiercoll_cuda_reduce_bandwidth allreduce_perf hiercoll_launch hiercoll_torch_ext >> "$out/build.txt" 2>&1 || true
  fi
  { echo "libstdc++ in libhiercoll: $(ldd $build/lib/libhiercoll.so.0 | grep -c libstdc++) shared," \
         "$(nm -D --defined-only $build/lib/libhiercoll.so.0 | grep -c codecvt) exported codecvt symbols"
    grep -o -- '-static[^ ]*\|[^ ]*\.a\b' $build/lib/CMakeFiles/hiercoll.dir/link.txt || true; } >> "$out/toolchain.txt"

  # 1. CUDA tests: device kernels vs host kernels; every collective on device buffers, ranks sharing the GPU,
  #    one scenario per step (indices: see test/cuda/collectives_cuda_test.cu).
  step cuda_reduce 60 $build/test/hiercoll_reduce_cuda_test
  local scenario names=(2r-1node 3r-1node 4r-1node 2x2-nodes 2x1-staged 1r)
  for scenario in 5 0 3 4 2 1; do
    HIERCOLL_TIMEOUT_MS=30000 step "cuda_collectives_${names[$scenario]}" "${COLL_LIMIT:-120}" \
      $build/test/hiercoll_collectives_cuda_test $scenario
  done
  # 2. The torch backend on CUDA tensors and DDP on a CUDA model (2 and 4 processes sharing the GPU), with the
  #    Python the binding was built for.
  local py
  py=$(torch_python)
  if [ -n "$py" ] && [ -d $build/python/hiercoll_torch ]; then
    for size in 2 4; do
      PYTHONPATH=$PWD/$build/python:$PWD/test/torch step "torch_cuda_$size" 150 "$py" -c "
import sys, torch
from launch import run_ranks
if not torch.cuda.is_available():
    print('SKIPPED: torch sees no CUDA device'); sys.exit(77)
outputs = run_ranks($size, 'worker_cuda.py', timeout=140)
print('\n'.join(outputs))
sys.exit(0 if all(' 0 failed' in out for out in outputs) else 1)"
    done
  else
    note "torch binding not built (see configure.txt): torch CUDA tests not run"
  fi
  if ! nvidia-smi -L > /dev/null 2>&1; then
    note "no GPU here: benchmarks not run"
    return 1
  fi
  # 3. Kernel bandwidth as a fraction of a device-to-device copy, same run, same buffers; what one small device
  #    collective costs the host, call by call, beside NCCL; dist.all_reduce on a CUDA tensor beside NCCL and
  #    torch's no-op backend.
  step reduce_bandwidth 60 $build/bench/hiercoll_cuda_reduce_bandwidth 256
  step call_cost 90 $build/bench/hiercoll_cuda_call_cost 2000
  if [ -n "$py" ] && [ -d $build/python/hiercoll_torch ]; then
    PYTHONPATH=$PWD/$build/python step torch_call_latency 120 "$py" bench/torch/call_latency.py --device cuda \
      --backends hiercoll,nccl,fake --sizes 8,64K,1M --calls 1000 --rounds 5
  fi
  # 4. Allreduce on device buffers (nccl-tests conventions): hiercoll on 1 and 2 ranks sharing the GPU, NCCL
  #    beside it on one rank per GPU (NCCL refuses two ranks on one GPU).
  local n gpus
  gpus=$(nvidia-smi -L | wc -l)
  for n in 1 2; do
    step "allreduce_hiercoll_cuda_$n" 90 $build/tools/hiercoll_launch -n "$n" --timeout 80 -- \
      $build/bench/allreduce_perf --backend hiercoll-cuda -b 8 -e 256M -f 8 -n 20 -w 5
  done
  step "allreduce_nccl_$gpus" 90 $build/tools/hiercoll_launch -n "$gpus" --timeout 80 -- \
    $build/bench/allreduce_perf --backend nccl -b 8 -e 256M -f 8 -n 20 -w 5
  # Ranks sharing the GPU run concurrently under CUDA MPS (time-sliced without it): 2 and 4 ranks, every size
  # checked. NCCL refuses two ranks on one GPU, so it has no row here.
  if command -v nvidia-cuda-mps-control > /dev/null && timeout 10 nvidia-cuda-mps-control -d; then
    sleep 1
    for n in 2 4; do
      step "allreduce_hiercoll_cuda_mps_$n" 90 $build/tools/hiercoll_launch -n "$n" --timeout 80 -- \
        $build/bench/allreduce_perf --backend hiercoll-cuda -b 8 -e 64M -f 4 -n 30 -w 5
    done
    echo quit | timeout 10 nvidia-cuda-mps-control || true
  else
    note "no CUDA MPS daemon here: ranks sharing the GPU only time-slice; MPS rows not run"
  fi
  # 5. The ALBERT masked-LM step on the GPU, hiercoll beside NCCL on the same ranks (one per GPU), bf16 autocast.
  local backend
  if [ -x $build/examples/albert_mlm/albert_mlm ] && [ -f "$debs/kjv.txt" ]; then
    for backend in hiercoll nccl; do
      step "albert_$backend" 150 $build/tools/hiercoll_launch -n "$gpus" --timeout 140 -- \
        $build/examples/albert_mlm/albert_mlm --config "${ALBERT_CONFIG:-base}" --corpus "$debs/kjv.txt" \
        --tokenizer "$out/spm-4000.model" --out "$out/albert-$backend" --device cuda --amp bf16 \
        --steps "${ALBERT_STEPS:-60}" --log-every 20 --backend $backend
      grep -h '"summary": true' "$out/albert_$backend.txt" | tee -a "$out/summary.txt" || true
    done
  else
    note "albert_mlm not built or no corpus in $debs: ALBERT step not run"
  fi
  # 6. The Hugging Face trainer.
  hf_albert
  return $status
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  hf) setup; build_torch_binding; hf_albert; exit $status ;;
  exec) shift  # the environment and torch binding of the checks, then any command (one-off experiments)
      setup; build_torch_binding
      PYTHONPATH=$PWD/$build/python exec "$@" ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run|hf|exec COMMAND..." >&2; exit 2 ;;
esac
