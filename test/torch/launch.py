"""Starts one Python process per rank with torch's env:// rendezvous and collects their results."""
import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def torchrun_command(script, *args, ranks=2):
    """`python -m torch.distributed.run` for `ranks` processes of `script` on this host, its rendezvous store on a
    port the kernel assigns as the store binds it (--standalone: c10d rendezvous at localhost:0, the ranks sharing
    the agent's store). A port found free beforehand may be taken before torchrun binds it, by an outgoing
    connection's ephemeral port or a test running beside: albert_hf failed so once (EADDRINUSE, 2026-11-27)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), script,
            *map(str, args)]


class HeldStore:
    """The rendezvous store of one run of ranks, served by this process on a port the kernel assigned as it bound it;
    every rank connects as a client (TORCHELASTIC_USE_AGENT_STORE), as torchrun's agent serves its workers. A port
    found free first and bound later by rank 0 can be taken in between, by another test's listener or an outgoing
    connection's ephemeral port."""

    def __init__(self):
        from torch.distributed import TCPStore

        self.store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

    def env(self):
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.store.port), "TORCHELASTIC_USE_AGENT_STORE": "True"}


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a killed pytest leaves no loop


@contextlib.contextmanager
def busy_loops(count=2):
    """`count` shell loops that never block (`while :; do :; done`), one core's worth each, for as long as the block
    runs: the load under which torch's fault-tolerance scenarios must still pass (the runs that crashed in issue 80
    had the test suite beside them). Ended with SIGKILL, and by the kernel if this process dies first."""
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=_die_with_parent)
             for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def base_env(extra=None):
    env = dict(os.environ)
    env.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "HIERCOLL_FABRIC_PROVIDER": "tcp",
            "HIERCOLL_FABRIC_IFACE": "lo",
            "HIERCOLL_TIMEOUT_MS": "60000",
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
        }
    )
    env.update(extra or {})
    return {key: value for key, value in env.items() if value is not None}  # None in `extra`: unset


# Variables torch or its libraries read while loading: a run that sets its own cannot use the zygote, whose children
# inherit torch already loaded under the zygote's environment.
_LOAD_TIME_PREFIXES = ("OMP_", "MKL_", "KMP_", "TORCH_", "PYTORCH_", "CUDA_", "LD_", "PYTHON")


class Zygote:
    """One zygote.py process; spawn() forks a rank from it, wait() collects its exit code."""

    def __init__(self):
        self.env = base_env()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "zygote.py")], env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.pending = b""
        self.exited = {}

    def usable_for(self, env):
        return self.proc.poll() is None and all(
            env.get(k) == self.env.get(k) for k in set(env) | set(self.env) if k.startswith(_LOAD_TIME_PREFIXES))

    def _message(self, deadline=None):
        """The zygote's next message, or None once `deadline` (time.monotonic()) has passed."""
        while b"\n" not in self.pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.proc.stdout], [], [], wait)[0]:
                return None
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                raise RuntimeError(f"the test zygote exited ({self.proc.wait()})")
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def spawn(self, script, args, env, stdout, stderr):
        request = {"script": script, "args": list(args), "env": env, "stdout": stdout, "stderr": stderr}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            message = self._message()
            if "pid" in message:
                return message["pid"]
            self.exited[message["exited"]] = message["returncode"]

    def wait(self, pid, deadline):
        """The child's exit code, or None if it is still running at `deadline`."""
        while pid not in self.exited:
            message = self._message(deadline)
            if message is None:
                return None
            if "exited" in message:
                self.exited[message["exited"]] = message["returncode"]
        return self.exited.pop(pid)


_zygote = None


def _get_zygote(env):
    """The shared zygote, started on first use; None where a run cannot use it (HIERCOLL_TEST_ZYGOTE=0 turns it off)."""
    global _zygote
    if os.environ.get("HIERCOLL_TEST_ZYGOTE", "1") == "0":
        return None
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = Zygote()
    return _zygote if _zygote.usable_for(env) else None


def _tails(out, err):
    """A failed rank's last words: where its stdout stopped (which step or scenario) and its stderr."""
    return f"stdout ends: {out[-600:]}\nstderr ends: {err[-3000:]}"


def run_ranks(size, script, args=(), env=None, timeout=240, killed=()):
    """Runs `script` on `size` ranks; returns each rank's stdout. Fails naming the ranks that failed; the ranks in
    `killed` must instead end by SIGKILL (a rank that kills itself to play a lost node).
    Ranks are forked from the zygote (torch already imported) where the run's environment allows it. They meet in
    a store this process holds for the run (HeldStore), unless `env` names a MASTER_PORT."""
    env = base_env(env)
    held = None
    if "MASTER_PORT" not in env:
        held = HeldStore()  # lives until every rank has ended
        env.update(held.env())
    zygote = _get_zygote(env)
    if zygote is None:
        return _run_ranks_spawned(size, script, args, env, timeout, killed)
    path = os.path.join(HERE, script)
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="hiercoll-ranks-") as logs:
        pids = []
        for rank in range(size):
            rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
            out, err = (os.path.join(logs, f"{rank}.{kind}") for kind in ("out", "err"))
            pids.append((zygote.spawn(path, [str(a) for a in args], rank_env, out, err), out, err))
        codes = [zygote.wait(pid, deadline) for pid, _, _ in pids]
        if None in codes:  # past the timeout: end every rank still running, as the spawned path does
            for (pid, _, _), code in zip(pids, codes):
                if code is None:
                    os.kill(pid, signal.SIGKILL)
            codes = [zygote.wait(pid, None) if code is None else code for (pid, _, _), code in zip(pids, codes)]
            timed_out = True
        else:
            timed_out = False
        outputs, failures = [], []
        for rank, ((_, out, err), code) in enumerate(zip(pids, codes)):
            with open(out) as f:
                outputs.append(f.read())
            with open(err) as f:
                error = f.read()
            if timed_out and code == -signal.SIGKILL and rank not in killed:
                failures.append(f"rank {rank} did not finish in {timeout} s\n{_tails(outputs[-1], error)}")
            elif code != (-signal.SIGKILL if rank in killed else 0):
                failures.append(f"rank {rank} exited with {code}\n{_tails(outputs[-1], error)}")
    assert not failures, "\n".join(failures)
    return outputs


def _run_ranks_spawned(size, script, args, env, timeout, killed=()):
    """run_ranks with one new interpreter per rank."""
    procs = []
    for rank in range(size):
        rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.join(HERE, script), *map(str, args)],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs, failures = [], []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, err = proc.communicate()
            failures.append(f"rank {rank} did not finish in {timeout} s\n{_tails(out, err)}")
            continue
        outputs.append(out)
        if proc.returncode != (-signal.SIGKILL if rank in killed else 0):
            failures.append(f"rank {rank} exited with {proc.returncode}\n{_tails(out, err)}")
    assert not failures, "\n".join(failures)
    return outputs
