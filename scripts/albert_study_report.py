"""Tables (and, with --markdown, docs/albert.md with PNG plots) from scripts/albert-study's results.jsonl, in the
shapes of the seeds' articles: throughput, scaling efficiency T(N)/(N*T(1)), hiercoll's speed-up over each backend,
and the speed-up from data-loader workers."""
import argparse
import collections
import datetime
import json
import os
import platform
import statistics

NAMES = {"hiercoll": "hiercoll", "gloo": "gloo", "mpi": "Open MPI", "nccl": "NCCL"}


def load(path):
    runs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            runs[(r["nodes"], r["requested_backend"], r["workers"])].append(r)
    # Each cell: the run with the median throughput (REPEATS > 1 alternates backends, noise is large here).
    cells = {}
    for key, rs in runs.items():
        rs.sort(key=lambda r: r["samples_per_s"])
        cells[key] = rs[len(rs) // 2]
    return cells


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--setting", default="")
    p.add_argument("--examples", type=int)
    p.add_argument("--markdown")
    p.add_argument("--plots")
    args = p.parse_args()
    cells = load(args.results)
    nodes = sorted({n for n, _, _ in cells})
    backends = [b for b in NAMES if any(k[1] == b for k in cells)]
    base = {b: cells.get((nodes[0], b, 0)) for b in backends}

    def rate(n, b, w=0):
        c = cells.get((n, b, w))
        return c["samples_per_s"] if c else None

    fmt = lambda x, spec=".1f": "–" if x is None else format(x, spec)
    first = next(iter(cells.values()))
    throughput = table(
        ["nodes", "ranks", "global batch", "steps"] + [f"{NAMES[b]} samples/s" for b in backends]
        + [f"{NAMES[b]} comm wait s/step" for b in backends],
        [[n, n * first["per_node"], cells[(n, backends[0], 0)]["global_batch"], cells[(n, backends[0], 0)]["steps"]]
         + [fmt(rate(n, b)) for b in backends]
         + [fmt(cells[(n, b, 0)]["comm_wait_s"] / max(1, cells[(n, b, 0)]["steps"] - 1), ".3f")
            if (n, b, 0) in cells else "–" for b in backends]
         for n in nodes if (n, backends[0], 0) in cells])
    efficiency = {b: {n: (rate(n, b) / ((n / nodes[0]) * rate(nodes[0], b)) if rate(n, b) and rate(nodes[0], b)
                          else None) for n in nodes} for b in backends}
    scaling = table(["nodes"] + [NAMES[b] for b in backends],
                    [[n] + [fmt(efficiency[b][n], ".2f") for b in backends] for n in nodes])
    others = [b for b in backends if b != "hiercoll"]
    speedup = table(["nodes"] + [f"hiercoll / {NAMES[b]}" for b in others],
                    [[n] + [fmt(rate(n, "hiercoll") / rate(n, b), ".2f") if rate(n, "hiercoll") and rate(n, b)
                            else "–" for b in others] for n in nodes])
    largest = nodes[-1]
    worker_counts = sorted({w for n, _, w in cells if n == largest})
    worker_backends = [b for b in backends if any((largest, b, w) in cells for w in worker_counts if w)]
    loader = table(["num_workers"] + [f"{NAMES[b]} samples/s" for b in worker_backends]
                   + [f"{NAMES[b]} speed-up" for b in worker_backends]
                   + [f"{NAMES[b]} data wait s" for b in worker_backends],
                   [[w] + [fmt(rate(largest, b, w)) for b in worker_backends]
                    + [fmt(rate(largest, b, w) / rate(largest, b, 0), ".2f") if rate(largest, b, w) and
                       rate(largest, b, 0) else "–" for b in worker_backends]
                    + [fmt(cells[(largest, b, w)]["data_wait_s"], ".2f") if (largest, b, w) in cells else "–"
                       for b in worker_backends] for w in worker_counts]) if len(worker_counts) > 1 else None

    print("## Throughput (samples/s, workers 0)\n" + throughput)
    print("\n## Scaling efficiency T(N) / (N/N0 * T(N0))\n" + scaling)
    print("\n## hiercoll's speed-up\n" + speedup)
    if loader:
        print(f"\n## Loader workers at {largest} nodes\n" + loader)
    if rate(largest, "hiercoll") and rate(largest, "gloo"):
        print(f"\nalbert-study: {largest} node(s): hiercoll {rate(largest, 'hiercoll'):.1f} samples/s, gloo "
              f"{rate(largest, 'gloo'):.1f}, hiercoll/gloo {rate(largest, 'hiercoll') / rate(largest, 'gloo'):.2f}")
    if not args.markdown:
        return

    plots = []
    if args.plots:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        os.makedirs(args.plots, exist_ok=True)
        for name, ylabel, value in [("throughput", "samples/s", lambda b, n: rate(n, b)),
                                    ("efficiency", "scaling efficiency", lambda b, n: efficiency[b][n])]:
            fig, ax = plt.subplots(figsize=(5, 3.4), dpi=110)
            for b in backends:
                xs = [n for n in nodes if value(b, n) is not None]
                ax.plot(xs, [value(b, n) for n in xs], marker="o", label=NAMES[b])
            ax.set_xlabel(f"nodes ({first['per_node']} ranks each)")
            ax.set_ylabel(ylabel)
            ax.set_xticks(nodes)
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            path = os.path.join(args.plots, f"{name}.png")
            fig.savefig(path)
            plots.append(path)
    rel = lambda path: os.path.relpath(path, os.path.dirname(args.markdown))
    doc = f"""# ALBERT masked-LM pretraining on the emulated cluster (the seeds' experiment)

Generated by `scripts/albert-study` on {datetime.date.today().isoformat()} ({platform.node() or 'this host'},
{os.cpu_count()} cores). Model: Hugging Face `AlbertForMaskedLM`, config `{first['config']}`
({first['parameters']:,} parameters), `examples/albert_hf/train.py`, DDP with each backend averaging the gradients
(hiercoll; gloo; Open MPI's `MPI_Allreduce` through mpi4py from the same DDP hook). Setting: {args.setting}.
Same number of examples at every scale ({args.examples} sequences of {first.get('global_batch', 0) // max(1, first['ranks'])}
per rank and step): the global batch grows with the nodes and the steps shrink, as in the seeds' tables.
Throughput is timed from the end of the first step. Each cell is one run (the median of REPEATS when more).

**What this machine means for the numbers.** All ranks of all emulated nodes share 2 CPU cores: at 3 nodes six
training processes (plus loader workers) time-slice two cores, so compute per rank shrinks as nodes are added and
the scaling efficiency falls far below what separate machines would give, whatever the backend. What the study
does show is the communication: the inter-node links are shaped like a slow network, so a backend that sends less
across them, or hides it behind backward, loses less time (the "comm wait" column: seconds per step that backward
ran past its last bucket's hand-over). Loader workers add processes to the same two cores, so here they compete
with training rather than feed an idle GPU, unlike the seeds' GPU machines.

## Throughput (samples/s, loader workers 0)

{throughput}

## Scaling efficiency T(N) / (N · T(1)), each backend against its own 1-node throughput

{scaling}

## Speed-up of hiercoll over each backend (ratio of samples/s, same scale)

{speedup}
"""
    if loader:
        doc += f"""
## Data-loader workers at {largest} nodes (`--num-workers`, the seeds' `num_workers`)

{loader}
"""
    for path in plots:
        doc += f"\n![{os.path.basename(path)}]({rel(path)})\n"
    doc += f"""
Reproduce: `scripts/albert-study` (knobs in its header; results in build/albert-study/results.jsonl, logs beside).
"""
    with open(args.markdown, "w") as f:
        f.write(doc)
    print(f"albert-study: wrote {args.markdown}" + (f" and {len(plots)} plots in {args.plots}" if plots else ""))


if __name__ == "__main__":
    main()
