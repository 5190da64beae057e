#!/usr/bin/env bash
# `pip install` of hiercoll_torch into a fresh virtual environment, as a user would: the build runs CMake against the
# torch of that environment, and afterwards `import hiercoll_torch` works from any directory without PYTHONPATH,
# and a 2-rank allreduce through the installed package gives the serial sum.
# To not download torch (a few GB) again, the fresh venv sees the project venv's torch through a .pth file.
#   usage: pip_install.sh <source dir> <work dir> <python with torch>
set -euo pipefail
src=$(realpath "$1") work=$2 torch_python=$3
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
"$torch_python" -m venv "$work/venv" 2>/dev/null || python3 -m venv "$work/venv"
torch_site=$("$torch_python" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
venv_site=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$torch_site" > "$venv_site/project-torch.pth"
"$work/venv/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10"
# A copy of the sources, so the build directory the package makes does not land in the checkout under test.
cp -r "$src" "$work/src" && rm -rf "$work/src"/build* "$work/src/.venv" "$work/src/.git"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$work/venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation "$work/src"
cd "$work"  # not the source tree: the import must come from site-packages
env -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import os, subprocess, sys
import hiercoll_torch
where = os.path.dirname(hiercoll_torch.__file__)
assert "site-packages" in where, f"hiercoll_torch imported from {where}, not the venv's site-packages"
print("hiercoll_torch", hiercoll_torch.__version__, "from", where)
worker = r'''
import os, torch, torch.distributed as dist, hiercoll_torch
dist.init_process_group("hiercoll")
rank, size = dist.get_rank(), dist.get_world_size()
x = torch.arange(1000, dtype=torch.float32) * (rank + 1)
dist.all_reduce(x)
expected = torch.arange(1000, dtype=torch.float32) * sum(r + 1 for r in range(size))
assert torch.equal(x, expected), (x[:4], expected[:4])
print(f"rank {rank} allreduce ok", flush=True)
dist.destroy_process_group()
'''
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", HIERCOLL_FABRIC_PROVIDER="tcp",
           HIERCOLL_FABRIC_IFACE="lo", HIERCOLL_TIMEOUT_MS="60000", OMP_NUM_THREADS="1")
procs = [subprocess.Popen([sys.executable, "-c", worker], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
outs = [p.communicate(timeout=120) for p in procs]
for r, (p, (out, err)) in enumerate(zip(procs, outs)):
    assert p.returncode == 0 and f"rank {r} allreduce ok" in out, f"rank {r}: {out}\n{err[-3000:]}"
print("installed package: 2-rank allreduce ok")
PY
