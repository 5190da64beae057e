"""Tables (and, with --markdown, docs/albert.md with PNG plots) from scripts/study/albert-study's results.jsonl, in the
shapes of the seeds' articles: throughput, scaling efficiency T(N)/(N*T(1)), hiercoll's speed-up over each backend,
and the speed-up from data-loader workers."""
import argparse
import collections
import datetime
import json
import os
import platform
import statistics

KNOWN = {"hiercoll": "hiercoll", "gloo": "gloo", "mpi": "Open MPI", "nccl": "NCCL"}


class Names(dict):
    """Display names; "hiercoll+hier" (a backend run with HIERCOLL_ALGO=hier) reads "hiercoll (ALGO=hier)"."""

    def __missing__(self, key):
        name, _, algo = key.partition("+")
        return f"{KNOWN.get(name, name)} (ALGO={algo})" if algo else KNOWN.get(name, name)


NAMES = Names(KNOWN)


def load(path):
    """Each cell's runs in the order they ran (REPEATS > 1 alternates the backends: the r-th runs of two backends
    ran back to back), and each cell's median run."""
    runs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            runs[(r.get("link", "-"), r["nodes"], r["requested_backend"], r["workers"])].append(r)
    # Each cell: the run with the median throughput (noise is large here).
    cells = {key: sorted(rs, key=lambda r: r["samples_per_s"])[len(rs) // 2] for key, rs in runs.items()}
    return cells, runs


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


class Study:
    """The cells of one link rate."""

    def __init__(self, cells, runs, link):
        self.cells = {k[1:]: v for k, v in cells.items() if k[0] == link}
        self.runs = {k[1:]: v for k, v in runs.items() if k[0] == link}
        self.link = link
        self.nodes = sorted({n for n, _, _ in self.cells})
        # In the order they ran; "B@A,C" is backend B's steps of a run interleaving A and C (train.py --interleave).
        self.backends = list(dict.fromkeys(k[1] for k in self.cells if "@" not in k[1]))
        self.interleaved = list(dict.fromkeys(k[1] for k in self.cells if "@" in k[1]))

    def rate(self, n, b, w=0):
        c = self.cells.get((n, b, w))
        return c["samples_per_s"] if c else None

    def comm_ms_per_step(self, n, b):
        """Exposed communication per timed step (the first step is not timed), the ranks' average: the median over
        the cell's runs, as its throughput (not the comm wait of its median-throughput run)."""
        runs = self.runs.get((n, b, 0), [])
        return statistics.median(1000 * r["comm_wait_s"] / max(1, r.get("timed_steps", r["steps"] - 1))
                                 for r in runs) if runs else None

    def speedup(self, n, b):
        """hiercoll's samples/s over backend b's at n nodes."""
        ours, theirs = self.rate(n, "hiercoll"), self.rate(n, b)
        return ours / theirs if ours and theirs else None

    def pair_ratios(self, n, b, ours="hiercoll"):
        """hiercoll's samples/s over backend b's in each repeat: runs made minutes apart differ by up to 10% here,
        the runs of one repeat ran one after the other (or were one run, interleaved)."""
        ours, theirs = self.runs.get((n, ours, 0), []), self.runs.get((n, b, 0), [])
        return [o["samples_per_s"] / t["samples_per_s"] for o, t in zip(ours, theirs)]

    def interleaved_pair(self):
        """The cells of the interleaved runs, hiercoll's and the other backend's ("hiercoll@...", "gloo@..."), and that
        backend's display name; None without interleaved runs of hiercoll and one other."""
        ours = next((b for b in self.interleaved if b.startswith("hiercoll@")), None)
        others = [b for b in self.interleaved if b != ours]
        if ours is None or len(others) != 1:
            return None
        return ours, others[0], NAMES[others[0].split("@")[0]]

    def interleaved_table(self):
        """hiercoll against the other backend of each interleaved run: per repeat, the two from one run."""
        pair = self.interleaved_pair()
        if not pair:
            return None
        ours, other, name = pair
        rows = []
        for n in self.nodes:
            pairs = self.pair_ratios(n, other, ours)
            if not pairs:
                continue
            interval = self.pooled_interval(n, ours, other)
            rows.append([n, fmt(self.rate(n, ours)), fmt(self.rate(n, other)), fmt(statistics.median(pairs), ".2f"),
                         ", ".join(f"{r:.2f}" for r in pairs),
                         f"{interval[0]:.3f} ± {interval[1]:.3f}" if interval else "–",
                         fmt(self.comm_ms_per_step(n, ours), ".0f"),
                         fmt(self.comm_ms_per_step(n, other), ".0f"), fmt(self.split(n, ours, "collective_ms"), ".0f"),
                         fmt(self.split(n, other, "collective_ms"), ".0f")])
        return table(["nodes", "hiercoll samples/s", f"{name} samples/s", f"median of the runs' hiercoll / {name}",
                      f"each run's hiercoll / {name}", f"all runs' steps pooled: hiercoll / {name}, 95% interval",
                      "hiercoll comm wait ms/step", f"{name} comm wait ms/step",
                      "hiercoll allreduce ms/step", f"{name} allreduce ms/step"], rows)

    def pooled_interval(self, n, ours, other):
        """hiercoll / the other from every interleaved step of the cell's runs pooled (mean step times), with its 95%
        interval from the steps' spread: whether the difference is larger than what this machine resolves."""
        lanes = []
        for b in (ours, other):
            runs = [r for r in self.runs.get((n, b, 0), []) if r.get("step_s_sd") is not None and r["timed_steps"] > 1]
            count = sum(r["timed_steps"] for r in runs)
            if count < 2:
                return None
            mean = sum(r["seconds"] for r in runs) / count
            # Within each run and between the runs' means: all steps as one sample.
            squares = sum((r["timed_steps"] - 1) * r["step_s_sd"] ** 2
                          + r["timed_steps"] * (r["seconds"] / r["timed_steps"] - mean) ** 2 for r in runs)
            lanes.append((mean, (squares / (count - 1) / count) ** 0.5))
        (ours_mean, ours_se), (other_mean, other_se) = lanes
        ratio = other_mean / ours_mean  # samples/s go as 1 / step time
        half = 1.96 * ratio * ((ours_se / ours_mean) ** 2 + (other_se / other_mean) ** 2) ** 0.5
        return ratio, half

    def efficiency(self, n, b):
        t, t1 = self.rate(n, b), self.rate(self.nodes[0], b)
        return t / ((n / self.nodes[0]) * t1) if t and t1 else None

    def throughput_table(self):
        any_cell = lambda n: next(c for (m, _, w), c in self.cells.items() if m == n and w == 0)
        return table(["nodes", "ranks", "global batch", "steps"] + [f"{NAMES[b]} samples/s" for b in self.backends]
                     + [f"{NAMES[b]} comm wait ms/step" for b in self.backends],
                     [[n, any_cell(n)["ranks"], any_cell(n)["global_batch"], any_cell(n)["steps"]]
                      + [fmt(self.rate(n, b)) for b in self.backends]
                      + [fmt(self.comm_ms_per_step(n, b), ".0f") for b in self.backends]
                      for n in self.nodes if any((n, b, 0) in self.cells for b in self.backends)])

    def split(self, n, b, key):
        """A figure of the runs' step timelines (examples/albert_hf/timeline.py), the median over the cell's runs."""
        values = [r["timeline"][key] for r in self.runs.get((n, b, 0), []) if key in (r.get("timeline") or {})]
        return statistics.median(values) if values else None

    def split_table(self):
        if not any(self.split(n, b, "collective_ms") is not None for n in self.nodes for b in self.backends):
            return None
        return table(["nodes"] + [f"{NAMES[b]} allreduce ms/step" for b in self.backends]
                     + [f"{NAMES[b]} ranks' spread ms/step" for b in self.backends]
                     + [f"{NAMES[b]} compute ms/step" for b in self.backends],
                     [[n] + [fmt(self.split(n, b, "collective_ms"), ".0f") for b in self.backends]
                      + [fmt(self.split(n, b, "handover_spread_ms"), ".0f") for b in self.backends]
                      + [fmt(self.split(n, b, "compute_ms"), ".0f") for b in self.backends]
                      for n in self.nodes])

    def scaling_table(self):
        return table(["nodes"] + [NAMES[b] for b in self.backends],
                     [[n] + [fmt(self.efficiency(n, b), ".2f") for b in self.backends] for n in self.nodes])

    def repeated(self):
        return any(len(self.pair_ratios(n, b)) > 1 for n in self.nodes for b in self.backends if b != "hiercoll")

    def speedup_table(self):
        others = [b for b in self.backends if b != "hiercoll"]
        repeated = self.repeated()
        pairs = lambda n, b: ", ".join(f"{r:.2f}" for r in self.pair_ratios(n, b)) or "–"
        paired = lambda n, b: fmt(statistics.median(self.pair_ratios(n, b)), ".2f") if self.pair_ratios(n, b) else "–"
        return table(["nodes"] + [f"hiercoll / {NAMES[b]}" for b in others]
                     + ([f"median of the repeats' hiercoll / {NAMES[b]}" for b in others] if repeated else [])
                     + ([f"each repeat's hiercoll / {NAMES[b]}" for b in others] if repeated else []),
                     [[n] + [fmt(self.speedup(n, b), ".2f") for b in others]
                      + ([paired(n, b) for b in others] if repeated else [])
                      + ([pairs(n, b) for b in others] if repeated else []) for n in self.nodes])

    def loader_table(self):
        largest = self.nodes[-1]
        counts = sorted({w for n, _, w in self.cells if n == largest})
        if len(counts) < 2:
            return None
        bs = [b for b in self.backends if any((largest, b, w) in self.cells for w in counts if w)]
        r = lambda w, b: self.rate(largest, b, w)
        return table(["num_workers"] + [f"{NAMES[b]} samples/s" for b in bs] + [f"{NAMES[b]} speed-up" for b in bs]
                     + [f"{NAMES[b]} data wait s" for b in bs],
                     [[w] + [fmt(r(w, b)) for b in bs]
                      + [fmt(r(w, b) / r(0, b), ".2f") if r(w, b) and r(0, b) else "–" for b in bs]
                      + [fmt(self.cells[(largest, b, w)]["data_wait_s"], ".2f") if (largest, b, w) in self.cells
                         else "–" for b in bs] for w in counts])


REPEATED_NOTE = ("hiercoll / X is the ratio of the two cells' medians. The runs of one repeat ran one after the other, "
                 "while repeats are minutes apart and this machine's speed drifts between them, so the median of the "
                 "repeats' own ratios is the steadier comparison; both are given.\n\n")


INTERLEAVED_NOTE = ("The same training run averages its even steps' gradients with one backend and its odd steps' "
                    "with the other (`train.py --interleave`: a second process group and DDP wrapper over the same "
                    "model; the first step's backend alternates with the repeats). Each backend's samples/s counts "
                    "only its own steps, each timed from the end of the step before. The machine's drift, which "
                    "between separate runs is larger than the backends' difference on one node, falls on both alike, "
                    "so this ratio measures the backends and not the minute each ran in. One run per repeat; the "
                    "ratio per run and their median. Identical steps still vary from one to the next here (by a "
                    "sixth of a step and more), so the table also pools every timed step of the cell's runs: the "
                    "ratio of the two backends' mean step times, with a 95% interval from the steps' spread (1.96 "
                    "standard errors). "
                    "Where that interval holds 1.00, this machine cannot tell the backends apart at that "
                    "scale.\n\n")


def plot(studies, directory):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    paths = []
    styles = ["-", "--", ":", "-."]
    for name, ylabel, value in [("throughput", "samples/s", Study.rate), ("efficiency", "scaling efficiency",
                                                                            Study.efficiency)]:
        fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
        for i, st in enumerate(studies):
            for j, b in enumerate(st.backends):
                xs = [n for n in st.nodes if value(st, n, b) is not None]
                ax.plot(xs, [value(st, n, b) for n in xs], marker="o", linestyle=styles[i % len(styles)],
                        color=f"C{j}", label=f"{NAMES[b]}, {st.link}")
        ax.set_xlabel(f"nodes ({studies[0].cells[next(iter(studies[0].cells))]['per_node']} ranks each)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(studies[0].nodes)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(directory, f"{name}.png")
        fig.savefig(path)
        paths.append(path)
    return paths


def noise_note(studies):
    """The 1-node runs of different link rates are the same configuration (nothing crosses a link): how far apart
    they are is this machine's run-to-run noise, the yardstick for every other difference."""
    spreads = []
    for b in dict.fromkeys(b for st in studies for b in st.backends):
        rates = [st.rate(1, b) for st in studies if st.rate(1, b)]
        if len(rates) > 1:
            spreads.append((max(rates) / min(rates) - 1, b, rates))
    if not spreads:
        return ""
    worst = max(spreads)
    return (f"**Noise.** The 1-node runs at the different link rates are one configuration run twice (no traffic "
            f"crosses a link), minutes apart: they differ by up to {100 * worst[0]:.0f}% ({NAMES[worst[1]]}: "
            f"{', '.join(f'{r:.1f}' for r in worst[2])} samples/s). Ratios between backends in one row, measured "
            f"back to back, are steadier than that, but differences of a few percent are not findings"
            + one_node_pairs(studies) + ".\n\n")


def one_node_pairs(studies):
    """The spread of hiercoll/gloo over the repeats of one node, where no link is crossed and the allreduce is a
    small part of a step on either backend: about what the VM alone does to a ratio."""
    ratios = [r for st in studies for r in st.pair_ratios(1, "gloo")]
    if len(ratios) < 2:
        return ""
    return (f": on one node, where no link is crossed and the allreduce is a small part of a step for either backend,"
            f" the {len(ratios)} repeats' hiercoll / gloo span {min(ratios):.2f}-{max(ratios):.2f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--setting", default="")
    p.add_argument("--examples", type=int)
    p.add_argument("--markdown")
    p.add_argument("--plots")
    args = p.parse_args()
    cells, runs = load(args.results)
    links = list(dict.fromkeys(k[0] for k in cells))  # in the order they ran
    studies = [Study(cells, runs, link) for link in links]
    sections = []
    for st in studies:
        text = f"### Link {st.link}: throughput (samples/s, loader workers 0)\n\n{st.throughput_table()}\n\n"
        split = st.split_table()
        if split:
            text += (f"### Link {st.link}: the comm wait in two parts (ms per step, medians over the steps of a run "
                     f"and over the repeats)\n\nFrom the ranks' step timelines (`train.py --timeline-out`, "
                     f"examples/albert_hf/timeline.py): the allreduce, from the last rank's hand-over of its last "
                     f"bucket to the last rank's end of backward; the ranks' spread, from the first rank's hand-over "
                     f"to the last one's, when the ranks that got there first wait for the slowest one's compute on "
                     f"the shared cores. A rank's comm wait is the allreduce plus its distance from the last "
                     f"hand-over. Beside them the rest of the step, the compute: from a rank's previous end of "
                     f"backward to its last hand-over (optimizer, next batch, forward, backward; the median rank's). "
                     f"It is the same work with every backend but for their small part in it (DDP's broadcast of "
                     f"the model's buffers before forward, and the buckets handed over before the last one where "
                     f"they hold backward up), and it varies with this machine's speed from one run to the "
                     f"next.\n\n{split}\n\n")
        interleaved = st.interleaved_table()
        if interleaved:
            text += (f"### Link {st.link}: hiercoll and {st.interleaved_pair()[2]} in one run, taking turns step by "
                     f"step\n\n"
                     f"{INTERLEAVED_NOTE}{interleaved}\n\n")
        text += (f"### Link {st.link}: scaling efficiency T(N) / (N · T(1)), each backend against its own "
                 f"{st.nodes[0]}-node throughput\n\n{st.scaling_table()}\n\n"
                 f"### Link {st.link}: speed-up of hiercoll over each backend (ratio of samples/s, same scale)\n\n"
                 + (REPEATED_NOTE if st.repeated() else "") + f"{st.speedup_table()}\n")
        loader = st.loader_table()
        if loader:
            text += (f"\n### Link {st.link}, {st.nodes[-1]} nodes: data-loader workers (`--num-workers`, the seeds' "
                     f"`num_workers`)\n\n{loader}\n")
        sections.append(text)
        print(text)
        n = st.nodes[-1]
        if st.rate(n, "hiercoll") and st.rate(n, "gloo"):
            print(f"albert-study: link {st.link}, {n} node(s): hiercoll {st.rate(n, 'hiercoll'):.1f} samples/s, gloo "
                  f"{st.rate(n, 'gloo'):.1f}, hiercoll/gloo {st.rate(n, 'hiercoll') / st.rate(n, 'gloo'):.2f}\n")
        ours, other, name = st.interleaved_pair() or (None, None, None)
        for n in st.nodes if ours else []:
            if st.pair_ratios(n, other, ours):
                print(f"albert-study: link {st.link}, {n} node(s), interleaved in one run: hiercoll "
                      f"{st.rate(n, ours):.1f} samples/s, {name} {st.rate(n, other):.1f}, median of the runs' "
                      f"hiercoll/{name} {statistics.median(st.pair_ratios(n, other, ours)):.2f}")
    if not args.markdown:
        return

    plots = plot(studies, args.plots) if args.plots else []
    first = next(iter(cells.values()))
    rel = lambda path: os.path.relpath(path, os.path.dirname(args.markdown))
    per_rank = first["global_batch"] // max(1, first["ranks"])
    doc = f"""# ALBERT masked-LM pretraining on the emulated cluster (the seeds' experiment)

Generated by `scripts/study/albert-study` on {datetime.date.today().isoformat()} ({os.cpu_count()} cores,
{platform.processor() or platform.machine()}). Model: Hugging Face `AlbertForMaskedLM`, config `{first['config']}`
({first['parameters']:,} parameters, {4 * first['parameters'] / 1e6:.1f} MB of fp32 gradients per step),
`examples/albert_hf/train.py`, DDP with each backend averaging the gradients: hiercoll; gloo; Open MPI's
`MPI_Allreduce` (mpi4py, from the same DDP hook on a background thread). Setting: {args.setting}. Same number of
examples at every scale ({args.examples} sequences, {per_rank} per rank and step): the global batch grows with the
nodes and the steps shrink, as in the seeds' tables. Throughput is timed from the end of the first step; "comm
wait" is how long backward ran past handing its last gradient bucket to the backend (communication not hidden
behind compute), per step, averaged over the ranks. Each cell is one run, or with REPEATS the median of the runs'
throughputs and the median of their comm waits; the repeats run the backends in rotated order.

**What this machine means for the numbers.** Every rank of every emulated node shares the same 2 CPU cores: at 3
nodes six training processes (plus loader workers) time-slice two cores, so the compute per second of each rank
shrinks as nodes are added and throughput stays roughly flat: scaling efficiency falls to about 1/N whatever the
backend, where separate machines would keep it near 1. Differences between backends therefore show only where
communication is a large part of the step: at 1 Gbit/s the {4 * first['parameters'] / 1e6:.1f} MB allreduce is a
few percent of a CPU step, at 100 Mbit/s it is a large part, closer to the share communication has on the seeds'
GPUs (steps ~100x faster, links ~100x faster). Loader workers add processes to the same two cores, so here they
compete with training instead of feeding an otherwise idle GPU as in the seeds' setup.

""" + noise_note(studies) + "\n".join(sections)
    for path in plots:
        doc += f"\n![{os.path.basename(path)}]({rel(path)})\n"
    doc += """
Reproduce: `scripts/study/albert-study` (knobs in its header; results in build/albert-study/results.jsonl, each run's
log beside it). On a GPU: examples/albert_hf/README.md.
"""
    with open(args.markdown, "w") as f:
        f.write(doc)
    print(f"albert-study: wrote {args.markdown}" + (f" and {len(plots)} plots in {args.plots}" if plots else ""))


if __name__ == "__main__":
    main()
