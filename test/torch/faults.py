"""Faults as launchers and users meet them, measured the same way for hiercoll and gloo: the tests
(test_backend.py) assert the bounds, scripts/study/fault-times reports the figures (docs/reliability.md)."""
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import torch

from launch import HERE, HeldStore, base_env


def serial_ddp_params(ranks, steps):
    """What worker_elastic.py's model holds after `steps` steps averaging `ranks` ranks' gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    for step in range(steps):
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for r in range(ranks):
            g = torch.Generator().manual_seed(1000 * step + r)
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            for acc, p in zip(grads, model.parameters()):
                acc += p.grad / ranks
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= 0.1 * g
    return model.state_dict()


def elastic_restart(backend, out_dir, die_at=3, steps=6, timeout=240):
    """torchrun --max-restarts 1 over worker_elastic.py (3 ranks, the last crashes at step `die_at`): (seconds from the
    crash to the last rank of the second attempt initialized, rank 0's final parameters, whether torchrun had to
    SIGKILL a rank that ignored its SIGTERM, the run's output)."""
    os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3", "--max-restarts", "1",
         "--monitor-interval", "0.1", os.path.join(HERE, "worker_elastic.py"), backend, out_dir, str(die_at),
         str(steps)], env=base_env(), capture_output=True, text=True, timeout=timeout)
    output = proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, output
    died = float(open(os.path.join(out_dir, "died")).read())
    ready = max(float(open(os.path.join(out_dir, f"ready.1.{r}")).read()) for r in range(3))
    return ready - died, torch.load(os.path.join(out_dir, "params")), "forcefully exiting via 9" in output, output


def sigterm_exit(backend, timeout=120):
    """2 ranks; rank 0 blocks in all_reduce while rank 1 sleeps; SIGTERM to rank 0: (seconds until it ended, its exit
    code)."""
    held = HeldStore()
    env = dict(base_env(held.env()), HIERCOLL_TIMEOUT_MS="60000", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "worker_signals.py"), backend],
                              env=dict(env, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for r in range(2)]
    try:
        ready, _, _ = select.select([procs[0].stdout], [], [], timeout)
        assert ready and procs[0].stdout.readline().startswith("waiting"), "rank 0 never reached its all_reduce"
        time.sleep(0.5)  # inside the call, its thread asleep in the backend
        start = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        code = procs[0].wait(timeout=60)
        return time.monotonic() - start, code
    finally:
        for p in procs:
            p.kill()
            p.wait()


def kill_notice(backend, victim, size=4, timeout=180):
    """`size` ranks all_reduce in a loop; rank `victim` SIGKILLs itself: the seconds from its death to each other
    rank's error (None: that rank never raised within the run's time), and the processes left running after."""
    with tempfile.TemporaryDirectory() as out_dir:
        held = HeldStore()
        env = dict(base_env(held.env()), HIERCOLL_TIMEOUT_MS="60000", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
        procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "worker_kill.py"), backend, str(victim), out_dir],
                                  env=dict(env, RANK=str(r), WORLD_SIZE=str(size), LOCAL_RANK=str(r)),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for r in range(size)]
        noticed = {}
        for r, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            m = re.search(r"noticed ([0-9.]+)", out)
            if r != victim:
                noticed[r] = float(m.group(1)) if m else None
        return noticed
