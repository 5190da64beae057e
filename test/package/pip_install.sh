#!/usr/bin/env bash
# `pip install` of hiercoll_torch into a fresh virtual environment, as a user would: pip's default isolated build
# stops at once naming --no-build-isolation; with it, the build runs CMake against the torch of that environment, and afterwards `import hiercoll_torch` works from any directory without PYTHONPATH,
# and a 2-rank allreduce and allgather through the installed package give what every rank expects.
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
# A copy of the sources, so the build directory the package makes does not land in the checkout under test. Build
# trees, venvs and .git are left out while copying, not deleted after: the work directory usually lies inside
# build/, and `cp -r` of a tree into itself fails (or not, depending on the order readdir returns).
mkdir "$work/src"
tar -C "$src" --exclude='./build*' --exclude='./.venv*' --exclude=./.git --exclude=./.cache -cf - . | tar -C "$work/src" -xf -
# pip's default, an isolated build, sees no torch: it must stop in its configure step (no compiling) with an error
# that says what to run instead.
if "$work/venv/bin/pip" install --disable-pip-version-check "$work/src" >"$work/isolated.log" 2>&1; then
  echo "FAIL: an isolated pip install built the torch backend without torch"; exit 1
fi
if ! grep -q -- "--no-build-isolation" "$work/isolated.log"; then
  tail -40 "$work/isolated.log"; echo "FAIL: the isolated build's error does not name --no-build-isolation"; exit 1
fi
echo "isolated pip install: stopped, naming --no-build-isolation"
rm -rf "$work/src/build-wheel"
# Through the compiler cache scripts/dev/build uses, where there is one: this build compiles the same sources with the same
# flags every time (its build directory, build-wheel/ in the copy, hashes as a relative path), so a rerun of an
# unchanged tree compiles nothing, or only the torch extension's files where the project's venv (its torch headers)
# moved. This test alone: 97 s compiling everything, 32 s from the cache; 219 s in a fresh clone's CI without it.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$work/src CCACHE_NOHASHDIR=1
fi
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$work/venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation "$work/src"
cd "$work"  # not the source tree: the import must come from site-packages
# The check a user runs after installing (hiercoll_torch/check.py): every line ok, 2 ranks equal to gloo.
env -u PYTHONPATH "$work/venv/bin/python" -m hiercoll_torch.check
# Two ranks of test/torch/worker_launch.py (allreduce and allgather) through the test launcher, with the venv's Python.
env -u PYTHONPATH "$work/venv/bin/python" - "$src/test/torch" <<'PY'
import os, sys
import hiercoll_torch
where = os.path.dirname(hiercoll_torch.__file__)
assert "site-packages" in where, f"hiercoll_torch imported from {where}, not the venv's site-packages"
print("hiercoll_torch", hiercoll_torch.__version__, "from", where)
sys.path.insert(0, sys.argv[1])
from launch import run_ranks
outputs = run_ranks(2, "worker_launch.py", timeout=120)
assert all(f"rank {r} of 2 ok" in out for r, out in enumerate(outputs)), outputs
print("installed package: 2-rank allreduce and allgather ok")
import torch
if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 14):
    outputs = run_ranks(2, "worker_by_name.py", timeout=120)
    assert all(f"rank {r} of 2 found hiercoll by name" in out for r, out in enumerate(outputs)), outputs
    print("installed package: found by name through its entry point, with no import")
PY
