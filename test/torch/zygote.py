"""A Python process that imports torch (and the torch.distributed modules the workers use) once, then forks one child
per rank of every test run: each child starts with torch already loaded instead of spending about a second of CPU
importing it, which on a 2-core machine was a third of the torch tests' time.

Started by launch.Zygote with the environment the children share (OMP_NUM_THREADS and the other settings torch reads
while loading); a run's own variables (MASTER_PORT, RANK, HIERCOLL_*) are set in the child before the worker starts,
and hiercoll_torch is imported by the worker itself, so hiercoll reads its settings as in a process of its own.

Protocol, one JSON object per line. Requests on stdin:
    {"script": path, "args": [...], "env": {...}, "stdout": path, "stderr": path}
answered by {"pid": N}; when a child ends: {"exited": N, "returncode": R} (R < 0: killed by signal -R, as subprocess
reports it). End of input: the zygote waits for its children and exits.
"""
import json
import os
import runpy
import select
import signal
import sys
import traceback

# Loaded here once, in a single thread: fork copies them into every child. Nothing here starts a thread or touches
# CUDA (a fork after either would be unsafe).
import torch  # noqa: F401
import torch.distributed  # noqa: F401
import torch.distributed.fsdp  # noqa: F401
import torch.distributed.tensor  # noqa: F401
import torch.nn.parallel  # noqa: F401
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook  # noqa: F401

try:
    from transformers import AlbertConfig, AlbertForMaskedLM  # noqa: F401  (the Hugging Face worker)
except ImportError:
    pass


def run_child(request):
    """In the forked child: become the worker process and return its exit code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["script"]
    sys.argv = [script, *request["args"]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: B902  (what a Python process does with an uncaught exception)
        traceback.print_exc()
        return 1


def serve():
    """The request loop; returns None in the zygote at end of input, an exit code in a forked child."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children = set()
    pending = b""
    eof = False

    def send(message):
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def reap():
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            children.discard(pid)
            send({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})

    while not eof or children:
        readable, _, _ = select.select([wake_r] + ([] if eof else [0]), [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            reap()
        if 0 in readable:
            data = os.read(0, 65536)
            eof = not data
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    os.close(wake_r)
                    os.close(wake_w)
                    return run_child(request)
                children.add(pid)
                send({"pid": pid})
        reap()  # a child that ended before its SIGCHLD handler could write the wake-up byte
    return None


if __name__ == "__main__":
    code = serve()
    sys.stdout.flush()
    sys.exit(code if code is not None else 0)
