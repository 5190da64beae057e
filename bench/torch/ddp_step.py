"""DDP step time of examples/torch_ddp/train_ddp.py, hiercoll vs gloo (and any other backend torch has), side by
side: the backends take turns, `--repeats` rounds, on the same ranks, model and data; prints the median of each
backend's median step time and each backend's time relative to hiercoll.

    PYTHONPATH=build/python .venv/bin/python bench/torch/ddp_step.py --ranks 4 --repeats 3

A benchmark, not a test: it checks nothing but that every run finished. Runs ranks on this machine (torchrun's
environment: RANK, WORLD_SIZE, MASTER_ADDR/PORT on 127.0.0.1); OMP_NUM_THREADS=1 so ranks do not fight over cores.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(HERE, "..", "..", "examples", "torch_ddp", "train_ddp.py")


def run_once(backend, args):
    # The ranks meet in a store this process serves on a port the kernel assigned as it bound it, every rank a
    # client (TORCHELASTIC_USE_AGENT_STORE, as under torchrun): a port found free first may be taken before rank 0
    # binds it.
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
               OMP_NUM_THREADS="1",
               HIERCOLL_FABRIC_PROVIDER=os.environ.get("HIERCOLL_FABRIC_PROVIDER", "tcp"),
               HIERCOLL_FABRIC_IFACE=os.environ.get("HIERCOLL_FABRIC_IFACE", "lo"),
               GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    procs = [subprocess.Popen([sys.executable, TRAINER, "--backend", backend, "--steps", str(args.steps),
                               "--batch", str(args.batch), "--width", str(args.width)],
                              env=dict(env, RANK=str(r), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(args.ranks)]
    outs = [p.communicate(timeout=args.timeout) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            sys.exit(f"{backend}: rank {r} exited with {p.returncode}\n{err[-2000:]}")
    match = re.search(r"(\d+) samples/s, median step ([\d.]+) ms, (\d+) parameters", outs[0][0])
    if not match:
        sys.exit(f"{backend}: no summary line in rank 0's output:\n{outs[0][0][-2000:]}")
    return float(match.group(2)), int(match.group(1)), int(match.group(3))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--backends", default="hiercoll,gloo")
    parser.add_argument("--repeats", type=int, default=3, help="rounds in which every backend runs once")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=512, help="hidden width of the MLP (its gradient size)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    backends = args.backends.split(",")
    runs = {b: [] for b in backends}
    params = 0
    for round_ in range(args.repeats):
        for b in backends:
            step_ms, samples, params = run_once(b, args)
            runs[b].append((step_ms, samples))
            print(f"round {round_ + 1} {b:>9}: median step {step_ms:8.3f} ms, {samples} samples/s", flush=True)

    base = statistics.median(ms for ms, _ in runs[backends[0]])
    print(f"\nDDP step, {args.ranks} ranks, MLP width {args.width} ({params} parameters, {4 * params / 1e6:.2f} MB of "
          f"fp32 gradients), batch {args.batch}/rank, median of {args.repeats} runs x {args.steps - 5} steps")
    print(f"| backend | step (ms) | samples/s | step time / {backends[0]} |")
    print("|---|---:|---:|---:|")
    for b in backends:
        ms = statistics.median(m for m, _ in runs[b])
        sps = statistics.median(s for _, s in runs[b])
        print(f"| {b} | {ms:.3f} | {sps:.0f} | {ms / base:.2f} |")


if __name__ == "__main__":
    main()
