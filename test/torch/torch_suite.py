"""PyTorch's own distributed tests (torch.testing._internal.distributed.distributed_test, as PyTorch's
test_distributed_spawn.py runs them) with the selection PyTorch runs for gloo, but with every process group that
asks for gloo on hiercoll. Each test spawns WORLD_SIZE processes and checks them; a rank that does not exit fails
its test at the harness's timeout, so exit after an error is checked too.

  PYTHONPATH=build/python .venv/bin/python test/torch/torch_suite.py [-k PATTERN ...]   (unittest's options)

What fails only because the backend is not named "gloo" (get_backend, dist.monitored_barrier): docs/torch.md."""
import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "gloo")  # the test file's selection: what it runs for gloo
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="hiercoll-torch-suite-"))
os.environ.setdefault("HIERCOLL_FABRIC_PROVIDER", "tcp")
os.environ.setdefault("HIERCOLL_FABRIC_IFACE", "lo")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
# torch's run_tests writes XML reports (and needs xmlrunner) whenever CI is set, as our .ci/run sets it.
os.environ.pop("CI", None)

import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

import hiercoll_torch  # noqa: E402,F401


def _on_hiercoll(backend):
    """gloo (by name, or the default) becomes hiercoll; other backends stay as asked."""
    if backend is None or str(backend).lower() == "gloo":
        return "hiercoll"
    return backend


def _patch(name, backend_position):
    """Wraps c10d.`name` so that its backend argument (keyword, or positional at `backend_position`) goes through
    _on_hiercoll; the default backend too."""
    original = getattr(c10d, name)

    def replacement(*args, **kwargs):
        if len(args) > backend_position:
            args = args[:backend_position] + (_on_hiercoll(args[backend_position]),) + args[backend_position + 1:]
        else:
            kwargs["backend"] = _on_hiercoll(kwargs.get("backend"))
        return original(*args, **kwargs)

    for module in (c10d, dist):
        setattr(module, name, replacement)


# Where each takes its backend positionally: init_process_group(backend, ...), new_group(ranks, timeout, backend, ...)
for _name, _position in (("init_process_group", 0), ("new_group", 2)):
    _patch(_name, _position)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    sys.exit(run_tests())
