"""Starts one Python process per rank with torch's env:// rendezvous and collects their results."""
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra=None):
    env = dict(os.environ)
    env.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            "HIERCOLL_FABRIC_PROVIDER": "tcp",
            "HIERCOLL_FABRIC_IFACE": "lo",
            "HIERCOLL_TIMEOUT_MS": "60000",
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
        }
    )
    env.update(extra or {})
    return env


def run_ranks(size, script, args=(), env=None, timeout=240):
    """Runs `script` on `size` ranks; returns each rank's stdout. Fails naming the ranks that failed."""
    env = base_env(env)
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
            failures.append(f"rank {rank} did not finish in {timeout} s\n{err[-3000:]}")
            continue
        outputs.append(out)
        if proc.returncode != 0:
            failures.append(f"rank {rank} exited with {proc.returncode}\n{err[-3000:]}")
    assert not failures, "\n".join(failures)
    return outputs
