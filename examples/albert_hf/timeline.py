"""Lines up the ranks' step timelines (train.py --timeline-out) to split a step's exposed communication into its two
parts: waiting for the slowest rank to finish backward (the spread of the ranks' hand-overs of their last bucket),
and the collective itself once every rank has handed over (from the last hand-over to the last backward's end).
comm wait in train.py's summary is the two together, averaged over the ranks; only the second depends on the
backend. Wall clocks: exact for ranks on one host (the emulated nodes); across machines, off by their clocks' skew.

    python examples/albert_hf/timeline.py [--json] [--backend NAME] 'OUT/timeline-{rank}.json' [more patterns]

One line per pattern. --backend: of a run with --interleave, only the steps that backend averaged.
"""
import argparse
import glob
import json
import statistics
import sys


def load(pattern):
    files = sorted(glob.glob(pattern.replace("{rank}", "*")))
    if not files:
        raise SystemExit(f"timeline: no files match {pattern}")
    ranks = []
    for name in files:
        with open(name) as f:
            ranks.append(json.load(f))
    steps = min(len(r["steps"]) for r in ranks)
    if steps < 3:
        raise SystemExit(f"timeline: {pattern}: {steps} steps, need at least 3 (the first is left out)")
    return ranks, steps


def summary(ranks, steps, backend=None):
    """Medians over the steps after the first (start-up), in milliseconds; with backend, over those it averaged."""
    spread, collective, end_spread, period, compute = [], [], [], [], []
    for i in range(1, steps):
        if backend is not None and ranks[0]["steps"][i].get("backend", ranks[0]["backend"]) != backend:
            continue
        handovers = [r["steps"][i]["handover"] for r in ranks]
        ends = [r["steps"][i]["backward_end"] for r in ranks]
        # A rank's own part of the step: from its previous backward's end (optimizer, next batch, forward, backward)
        # to its last hand-over. The same work whatever the backend but for the backend's small part in it (DDP's
        # buffer broadcast, buckets handed over earlier that hold backward up), so it shows how fast the machine ran
        # during a run (the median rank's: one rank's slow step is the spread's).
        compute.append(statistics.median(r["steps"][i]["handover"] - r["steps"][i - 1]["backward_end"] for r in ranks))
        spread.append(max(handovers) - min(handovers))
        collective.append(max(ends) - max(handovers))
        end_spread.append(max(ends) - min(ends))  # how far apart the ranks start the next step
        if i > 1:
            period.append(max(ends) - max(r["steps"][i - 1]["backward_end"] for r in ranks))
    if not spread:
        raise SystemExit(f"timeline: no step after the first was averaged by {backend}")
    ms = lambda xs: 1e3 * statistics.median(xs)
    return {"backend": backend or ranks[0]["backend"], "ranks": len(ranks), "steps": len(spread),
            "handover_spread_ms": ms(spread),
            "collective_ms": ms(collective), "end_spread_ms": ms(end_spread), "step_ms": ms(period),
            "compute_ms": ms(compute)}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per pattern (scripts/study/albert-study keeps "
                                                            "it with the run's summary)")
    parser.add_argument("--backend", help="only the steps this backend averaged (a run with --interleave)")
    parser.add_argument("patterns", nargs="+")
    args = parser.parse_args(argv)
    if args.json:
        for pattern in args.patterns:
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v
                              for k, v in summary(*load(pattern), args.backend).items()}))
        return
    print("| backend | ranks | steps | hand-over spread (ms) | last hand-over to last backward end (ms) "
          "| backward ends' spread (ms) | step (ms) | compute (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for pattern in args.patterns:
        s = summary(*load(pattern), args.backend)
        print(f"| {s['backend']} | {s['ranks']} | {s['steps']} | {s['handover_spread_ms']:.0f} | "
              f"{s['collective_ms']:.0f} | {s['end_spread_ms']:.0f} | {s['step_ms']:.0f} | {s['compute_ms']:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
