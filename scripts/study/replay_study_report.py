#!/usr/bin/env python3
"""The report of scripts/study/replay-study: reads its results.jsonl, prints the tables, and with --markdown writes
docs/replay.md (the text around the tables is written from the figures, so a rerun rewrites it whole).

    scripts/study/replay_study_report.py build/replay-study/results.jsonl --markdown docs/replay.md
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchlib
from benchlib import BUILD, kept_sections, write_section  # noqa: E402

SIM = os.path.join(BUILD, "bench", "hiercoll_sim")

# SageMaker's library over PyTorch DDP (NCCL) for ALBERT on p4d nodes, from the source article: nodes -> gain.
SEED_P4D = {2: 0.14, 4: 0.33, 8: 0.35, 16: 0.32}
NETWORKS = {"p4d": "p4d.24xlarge: 8 A100 (312 TFLOPS bf16 peak), 4 x 100 Gbit/s EFA",
            "p3dn": "p3dn.24xlarge: 8 V100 (125 TFLOPS fp16 peak), 100 Gbit/s EFA"}
# The network alone, for runs whose compute comes from a recorded profile rather than the instance's accelerator.
LINKS = {"p4d": "p4d.24xlarge's network: 4 x 100 Gbit/s EFA", "p3dn": "p3dn.24xlarge's network: 100 Gbit/s EFA"}
BACKEND_NAMES = {"hiercoll": "hiercoll (auto)", "hiercoll+hier": "hiercoll hierarchical",
                 "hiercoll+sharded": "hiercoll sharded servers", "hiercoll+ring": "hiercoll ring",
                 "gloo": "DDP on gloo", "mpi": "DDP on Open MPI"}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def per_step(run):
    """(step seconds, exposed communication seconds per step), undilated, for a trainer or a replay summary."""
    if "step_s" in run:  # replay.py: means per step, already divided by the dilation
        return run["step_s"], run["comm_wait_s"]
    timed = run["steps"] - 1  # train.py: the first step is not timed; comm_wait_s is their sum
    return run["global_batch"] / run["samples_per_s"], run["comm_wait_s"] / timed


def pct(x):
    return f"{x * 100:+.1f}%"


def validation(runs):
    rows = []
    for r in runs:
        if r.get("part") != "validate" or r.get("kind") != "replay":
            continue
        real = [t for t in runs if t.get("part") == "validate" and t.get("kind") == "trainer" and
                all(t[k] == r[k] for k in ("nodes", "per_node", "link", "requested_backend"))]
        if not real:
            continue
        (rs, rw), (ps, pw) = per_step(real[-1]), per_step(r)
        rows.append((r, rs, rw, ps, pw))
    if not rows:
        return [], 0.0
    lines = ["| layout | link | backend | trainer: step (ms) | replay: step (ms) | error | trainer: exposed comm "
             "(ms/step) | replay: exposed comm (ms/step) | error |", "|---|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for r, rs, rw, ps, pw in rows:
        worst = max(worst, abs(ps / rs - 1))
        lines.append(f"| {r['nodes']} x {r['per_node']} | {r['link']} | {r['requested_backend']} | {rs * 1e3:.1f} | "
                     f"{ps * 1e3:.1f} | {pct(ps / rs - 1)} | {rw * 1e3:.1f} | {pw * 1e3:.1f} | "
                     f"{pct(pw / rw - 1) if rw > 0 else '-'} |")
    return lines, worst


def layout(run):
    """A tables run's node layout: (ranks per node, NICs per node, sequences per rank)."""
    return run["per_node"], run.get("rails", 1), run["batch"]


def of_layout(runs, key):
    """The tables runs of one layout, and every run of the other parts."""
    return [r for r in runs if r.get("part") != "tables" or layout(r) == key]


def medians(runs, part, config="base"):
    """{(network, nodes, backend, dilation): (median step s, median exposed comm s, runs)} of one model config"""
    groups = {}
    for r in runs:
        if r.get("part") == part and r.get("config") == config:
            groups.setdefault((r["network"], r["nodes"], r["requested_backend"], r["dilation"]), []).append(r)
    return {k: (statistics.median(x["step_s"] for x in v), statistics.median(x["comm_wait_s"] for x in v), v)
            for k, v in groups.items()}


def dilation_table(runs):
    m = medians(runs, "dilation")
    if not m:
        return []
    lines = ["| dilation | link (emulated) | backend | step (ms, undilated) | exposed comm (ms) | hiercoll over gloo | "
             "runs |", "|---|---|---|---|---|---|---|"]
    for (net, nodes, backend, d), (step, wait, rs) in sorted(m.items(), key=lambda kv: (kv[0][3], kv[0][2])):
        gloo = m.get((net, nodes, "gloo", d))
        ratio = f"{gloo[0] / step:.3f}x" if gloo and backend != "gloo" else ""
        lines.append(f"| {d:g} | {rs[0]['link_mbit']:g} Mbit/s | {backend} | {step * 1e3:.2f} | {wait * 1e3:.2f} | "
                     f"{ratio} | {len(rs)} |")
    return lines


def network_table(runs, net, config):
    m = {k: v for k, v in medians(runs, "tables", config).items() if k[0] == net}
    if not m:
        return [], {}
    any_run = next(iter(m.values()))[2][0]
    nodes_list = sorted({k[1] for k in m})
    backends = [b for b in BACKEND_NAMES if any(k[2] == b for k in m)]
    per_node = any_run["per_node"]
    hardware = NETWORKS[net] if any_run["profile"].startswith("flops") else LINKS[net]
    lines = [f"**{net}, ALBERT-{config}** ({hardware}): each emulated node's link {any_run['link_mbit']:g} Mbit/s = "
             f"{any_run['link_mbit'] * any_run['dilation'] / 1000:g} Gbit/s / D, compute x D, D = "
             f"{any_run['dilation']:g}; {per_node} ranks per node"
             + (f", {any_run['rails']} NICs per node of {any_run['link_mbit'] / any_run['rails']:g} Mbit/s each"
                if any_run.get("rails", 1) > 1 else "") +
             f"; per rank {any_run['batch']} sequences of "
             f"{any_run['seq_len']} tokens, {any_run['compute_s'] * 1e3:.1f} ms of compute per step "
             f"({any_run['profile']}); {any_run['gradient_mb']:.1f} MB of fp32 gradients. Times undilated.", "",
             "| nodes | backend | samples/s | step (ms) | exposed comm (ms) | scaling efficiency | over DDP on gloo | "
             "over DDP on Open MPI | seed (SMDDP over DDP) | runs |", "|---|---|---|---|---|---|---|---|---|---|"]
    gains = {}
    for n in nodes_list:
        for b in backends:
            if (net, n, b, any_run["dilation"]) not in m:
                continue
            step, wait, rs = m[(net, n, b, any_run["dilation"])]
            ranks = rs[0]["ranks"]
            throughput = rs[0]["batch"] * ranks / step
            one = m.get((net, min(nodes_list), b, any_run["dilation"]))
            eff = ""
            if one and min(nodes_list) == 1:
                t1 = one[2][0]["batch"] * one[2][0]["ranks"] / one[0]
                eff = f"{throughput / (n * t1):.3f}"
            over = {}
            for base in ("gloo", "mpi"):
                other = m.get((net, n, base, any_run["dilation"]))
                over[base] = pct(other[0] / step - 1) if other and b not in ("gloo", "mpi") else ""
                if other and b not in ("gloo", "mpi"):
                    gains[(n, b, base)] = other[0] / step - 1
            seed = f"+{SEED_P4D[n] * 100:.0f}%" if net == "p4d" and n in SEED_P4D and b == "hiercoll" else ""
            lines.append(f"| {n} | {BACKEND_NAMES[b]} | {throughput:.0f} | {step * 1e3:.2f} | {wait * 1e3:.2f} | "
                         f"{eff} | {over['gloo']} | {over['mpi']} | {seed} | {len(rs)} |")
    return lines, gains


def bytes_table(runs):
    """Network bytes each node sends per step, per scheme, and their time at the network's line rate."""
    any_run = next((r for r in runs if r.get("part") == "tables" and r["config"] == "base"), None)
    if any_run is None:
        return []
    s = any_run["gradient_mb"] * 2**20
    L = any_run["per_node"]
    lines = ["| nodes | flat ring over N·L ranks (gloo, Open MPI) | hierarchical / sharded (hiercoll) | "
             "p4d time at 400 Gbit/s, ring / hierarchical (ms) | p3dn time at 100 Gbit/s (ms) |",
             "|---|---|---|---|---|"]
    for n in sorted({r["nodes"] for r in runs if r.get("part") == "tables" and r["config"] == "base"}):
        if n == 1:
            continue
        ring_node = 2 * (n * L - 1) / (n * L) * s  # 2(NL-1) chunks of S/(NL) over the node's one outgoing edge
        hier = 2 * (n - 1) / n * s
        t = lambda b, gbit: b * 8 / (gbit * 1e9) * 1e3  # noqa: E731
        lines.append(f"| {n} | {ring_node / 2**20:.1f} MB | {hier / 2**20:.1f} MB | "
                     f"{t(ring_node, 400):.2f} / {t(hier, 400):.2f} | {t(ring_node, 100):.2f} / {t(hier, 100):.2f} |")
    return lines


def where_gains_come_from(runs, nets):
    """The buckets' timing (from the replays) and the measured gains, in words."""
    lines = []
    timed = [r for r in runs if r.get("part") == "tables" and r.get("bucket_handover_ms_mb") and r["config"] == "base"]
    if timed:
        r = max(timed, key=lambda r: r["nodes"])
        handed = ", ".join(f"{mb:g} MB at {ms:.1f} ms" for ms, mb in r["bucket_handover_ms_mb"])
        lines += [f"**Overlap with backward, bucket order and size.** DDP rebuilt its buckets after the first step "
                  f"into {len(r['bucket_handover_ms_mb'])} of at most 25 MB; in a {r['nodes']}-node replay "
                  f"({r['requested_backend']}) backward ran {r['backward_compute_ms']:.1f} ms of compute and handed "
                  f"them over at {handed} after it began (undilated; the CPU's own work of copying gradients into "
                  "buckets is not dilated and shows here). ALBERT's shared layer and tied embeddings make every "
                  "bucket ready only when backward is nearly done, so each backend's allreduce is almost entirely "
                  "exposed: the step is the compute plus the allreduce, and a backend gains exactly what its "
                  "allreduce saves.", ""]
    for (config, net, (per_node, rails, batch)), (_, gains) in nets.items():
        shape = f"{per_node} ranks and {rails} NIC{'s' if rails > 1 else ''} per node, {batch} sequences per rank"
        for n in sorted({k[0] for k in gains}):
            parts = [f"{BACKEND_NAMES[b]} {pct(g)} over {'gloo' if base == 'gloo' else 'Open MPI'}"
                     for (nn, b, base), g in sorted(gains.items()) if nn == n]
            if parts:
                lines.append(f"- {net}, ALBERT-{config}, {shape}, {n} node{'s' if n > 1 else ''}: " +
                             "; ".join(parts) + ".")
    if lines:
        lines.append("")
    return lines


def seed_gap(runs):
    """What the baseline's exposed communication would have to be for the seed's gains, against the replay."""
    m = {k: v for k, v in medians(runs, "tables").items() if k[0] == "p4d" and k[2] == "hiercoll"}
    if not m:
        return []
    lines = ["## What it would take to reach the seed's figures", "",
             "A backend can only remove the communication DDP leaves exposed. For the seed's gain g over DDP, DDP's "
             "step must be (1+g) times SageMaker's. Taking hiercoll's replayed p4d step as SageMaker's, DDP's "
             "exposed communication would have been:", "",
             "| nodes | hiercoll step (ms) | seed's gain | DDP step it implies (ms) | DDP exposed comm (ms) | "
             "share of DDP's step | DDP's network rate it implies (Gbit/s per node) |", "|---|---|---|---|---|---|---|"]
    for (net, n, b, d), (step, wait, rs) in sorted(m.items()):
        if n not in SEED_P4D:
            continue
        g = SEED_P4D[n]
        ddp = (1 + g) * step
        exposed = ddp - rs[0]["compute_s"]
        eight = 8  # a p4d node's GPUs: a flat ring's bytes per node, 2(8N-1)/(8N)·S
        node_bytes = 2 * (eight * n - 1) / (eight * n) * rs[0]["gradient_mb"] * 2**20
        lines.append(f"| {n} | {step * 1e3:.2f} | +{g * 100:.0f}% | {ddp * 1e3:.2f} | {exposed * 1e3:.2f} | "
                     f"{exposed / ddp * 100:.0f}% | {node_bytes * 8 / exposed / 1e9:.0f} |")
    lines += ["", "The last column is the rate at which DDP's flat ring would have to move its bytes for the "
              "whole allreduce to be exposed that long: far below p4d's 400 Gbit/s. NCCL over EFA was reported at "
              "17-33 GB/s (136-264 Gbit/s) bus bandwidth on p4d in 2021 and 6-10 GB/s on p3dn in 2019 "
              "(docs/scaling.md gives the sources), above what the seed's gains need at this step time. So the "
              "seed's figures need either shorter steps than this profile's (a smaller batch per GPU, or a faster "
              "accelerator utilisation), or a DDP that ran well below NCCL's published EFA bandwidth, or costs "
              "outside the allreduce; at the line rate, with the same links for every backend, the replay gives "
              "the gains in the tables above.", ""]
    return lines


def sim_step_ms(nodes, local, compute_ms, grad_mb, net_gbit, overlap):
    """hiercoll_sim albert's step times (ring, hierarchical, sharded) for one layout, in ms."""
    out = subprocess.run([SIM, "albert", "--nodes", str(nodes), "--local", str(local), "--compute-ms",
                          f"{compute_ms:.4f}", "--grad-mb", f"{grad_mb:.3f}", "--net-gbps", f"{net_gbit / 8:.3f}",
                          "--sharded-net-gbps", f"{net_gbit / 8:.3f}", "--intra-gbps", "1000",
                          "--overlap", str(overlap)], check=True, stdout=subprocess.PIPE, text=True).stdout
    header, row = [line for line in out.splitlines() if not line.startswith("#")][:2]
    v = dict(zip(header.split(","), map(float, row.split(","))))
    return {"gloo": v["step_ring_ms"], "hiercoll+hier": v["step_hier_ms"], "hiercoll+sharded": v["step_sharded_ms"]}


def model_check(runs):
    """docs/scaling.md's section: the cost model (hiercoll_sim albert) against the replayed steps."""
    m = medians(runs, "tables")
    rows = []
    for (net, n, b, d), (step, wait, rs) in sorted(m.items()):
        if n < 2 or b not in ("gloo", "hiercoll+hier", "hiercoll+sharded"):
            continue
        r = rs[0]
        net_gbit = r["link_mbit"] * d / 1000
        predicted = [sim_step_ms(n, r["per_node"], r["compute_s"] * 1e3, r["gradient_mb"] * 2**20 / 1e6, net_gbit,
                                 overlap)[b] for overlap in (0.66, 0.0)]
        rows.append(f"| {net} | {n} x {r['per_node']} | {BACKEND_NAMES[b]} | {step * 1e3:.2f} | {predicted[0]:.2f} "
                    f"({pct(predicted[0] / (step * 1e3) - 1)}) | {predicted[1]:.2f} "
                    f"({pct(predicted[1] / (step * 1e3) - 1)}) |")
    if not rows:
        return ""
    return "\n".join([
        "## The cost model against the DDP replay", "",
        "Command: `scripts/study/replay-study` (this section is written by its report, `scripts/study/replay_study_report.py "
        "--scaling`). The replayed step (docs/replay.md, undilated medians) beside `hiercoll_sim albert` for the "
        "same layout, compute, gradient size and link rate (intra-node: 1000 GB/s, since shared memory is not "
        "dilated), with the model's usual assumption that buckets overlap two thirds of the compute, and with no "
        "overlap. DDP on gloo is the model's flat ring.", "",
        "| network | nodes x ranks | scheme | replay step (ms) | model, 66% overlap (error) | model, no overlap "
        "(error) |", "|---|---|---|---|---|---|"] + rows + [
        "", "ALBERT's gradients become ready at the end of backward (its layers share one set of weights), so the "
        "model's overlap assumption, which scripts/study/scale-model uses for the seed's table, does not hold for it; "
        "with no overlap the model should follow the replay."])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results")
    p.add_argument("--markdown", help="write the report here")
    p.add_argument("--scaling", help="write the model check into this document's replay-check section")
    p.add_argument("--section", help="write only the tables part's tables, between this section's markers of "
                   "--markdown, and leave the rest of that document as it is")
    args = p.parse_args()
    runs = load(args.results)
    layouts = sorted({layout(r) for r in runs if r.get("part") == "tables"})
    if args.section:
        write_tables_section(runs, layouts, args.markdown, args.section)
        return
    # The sections that compare with the seed and the model take one layout: the first (fewest ranks per node).
    all_runs, runs = runs, of_layout(runs, layouts[0]) if layouts else runs

    val, worst = validation(runs)
    dil = dilation_table(runs)
    configs = sorted({r["config"] for r in runs if r.get("part") == "tables"}, key=lambda c: c != "base")
    nets = {(config, net, key): network_table(of_layout(all_runs, key), net, config)
            for config in configs for net in NETWORKS for key in layouts}
    out = ["# The seeds' experiment replayed: DDP at accelerator speed over emulated links", "",
           "Written by `scripts/study/replay-study` (about 70 minutes on this 2-core machine; the parts can run alone, "
           "see its header). Everything below comes from the run that wrote it.", ""]
    out += INTRO
    if val:
        out += ["## Validation: the replay reproduces the real CPU trainer", "",
                "`examples/albert_hf/train.py --config tiny --steps 30 --profile-out ...` trains the tiny ALBERT on "
                "these CPUs while every rank records each layer call's forward and backward time "
                "(`step_profile.Recorder`); `examples/albert_replay/replay.py --profile ...` then replays those "
                "recorded steps, one after another, on the same layout and backend at dilation 1, with DDP and the "
                "backend running for real. Step: the mean over 29 timed steps; exposed communication: how long "
                "backward ran past the hand-over of its last bucket, mean per step (rank 0).", ""]
        out += val
        out += ["", f"Largest error: {worst * 100:.1f}% on the step time. The exposed communication is a few "
                "milliseconds on one node and its relative error is large there; over the shaped link it is a "
                "large share of the step and the replay matches it. Means, not medians: a CPU's step times vary and "
                "the slower rank of each step sets the pace, so a replay of mean unit times runs a steadier job than "
                "the one recorded (it was 20-30 ms short of the trainer's step before the replay went through the "
                "recorded steps one by one).", ""]
    if dil:
        out += ["## Dilation: the same ratios at two dilations", "",
                "ALBERT-base on p4d, 2 nodes x 2 ranks; D = 200 (link 2 Gbit/s, compute x200) and D = 400 (1 Gbit/s, "
                "x400). Medians of the runs listed.", ""]
        out += dil + [""]
    for (config, net, key), (lines, gains) in nets.items():
        if lines:
            out += [f"## {net}, ALBERT-{config}{layout_title(key, layouts)}: throughput, scaling efficiency, "
                    "speed-up", ""] + lines + [""]
    bt = bytes_table(runs)
    if bt:
        out += ["## Where the differences come from", "",
                "Bytes each node sends over the network per step (gradient size S, N nodes, L ranks per node): "
                "a flat ring in rank order crosses each node boundary once per direction and sends 2(NL-1)/(NL)·S; "
                "the hierarchical allreduce (and the sharded servers) send 2(N-1)/N·S. At line rate:", ""]
        out += bt + [""]
    out += where_gains_come_from(runs, nets)
    out += seed_gap(runs)
    if args.markdown:  # sections other runs wrote (SECTION=...: the seeds' node layout) stay
        for section in kept_sections(args.markdown):
            out += ["", section]
    text = "\n".join(out) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    check = model_check(runs)
    if args.scaling and check:
        write_section(args.scaling, "replay-check", check)
        print(check)


def layout_title(key, layouts):
    """ ", 8 ranks x 4 NICs per node, 16 sequences per rank" where the results hold more than one layout."""
    if len(layouts) < 2:
        return ""
    per_node, rails, batch = key
    return f", {per_node} ranks x {rails} NIC{'s' if rails > 1 else ''} per node, {batch} sequences per rank"


def write_tables_section(runs, layouts, path, section):
    """The tables part alone, into one section of `path` (a run of some layouts beside a report of others)."""
    out, nets = [], {}
    configs = sorted({r["config"] for r in runs if r.get("part") == "tables"}, key=lambda c: c != "base")
    for config in configs:
        for net in NETWORKS:
            for key in layouts:
                lines, gains = network_table(of_layout(runs, key), net, config)
                if lines:
                    nets[(config, net, key)] = (lines, gains)
                    out += [f"### {net}, ALBERT-{config}{layout_title(key, [None, None])}", ""] + lines + [""]
    out += where_gains_come_from(runs, nets)
    text = "\n".join(out)
    print(text)
    if path:
        write_section(path, section, text)


INTRO = [
    "On an accelerator a step takes tens of milliseconds and the host's CPUs are free for communication; on this "
    "2-core machine every rank computes on the same two cores (docs/albert.md), so compute dominates and backends "
    "differ by a few percent. The replay restores the seeds' regime: it runs real "
    "`torch.nn.parallel.DistributedDataParallel` (its Reducer, buckets and hooks) over the real backend on emulated "
    "nodes (`scripts/emulation/cluster`: network namespaces, each node's link shaped with tc), around a model with ALBERT's "
    "exact parameter tensors (transformers' `AlbertForMaskedLM` from an `AlbertConfig`, random weights), but its "
    "forward and backward *sleep* for the time an accelerator would take (`examples/albert_replay`). Sleeping costs "
    "no CPU, so eight ranks fit on two cores while the communication is real.",
    "",
    "- **Gradient timing.** Backward hands DDP each parameter's gradient after the backward of the parameter's first "
    "call in forward order, as a GPU's autograd does. ALBERT calls one shared layer 12 times and ties the MLM "
    "decoder to the word embeddings, so almost all of its gradient (the shared layer and the embeddings) is ready "
    "only at the very end of backward: DDP can hide little of ALBERT's allreduce behind backward, whatever the "
    "backend. Each replayed step checks every gradient is the average of the ranks' (no data silently wrong).",
    "- **Compute profile.** No GPU was lent to this project for a profile, so the times come from FLOPs: "
    "`torch.utils.flop_counter` counts each layer call of the real model (matrix products and attention), backward "
    "is twice forward, and the accelerator runs at 35% of its peak (A100 312 TFLOPS bf16, V100 125 TFLOPS fp16); "
    "1 ms of optimizer per step. `--profile` takes a recorded profile instead (the validation below uses one from "
    "the CPU trainer).",
    "- **Dilation.** One factor D multiplies every compute time and divides the link rate: 400 Gbit/s of p4d EFA "
    "and a 21 ms step become 1 Gbit/s and 8.4 s at D = 400, so the ratio of communication to compute is the real "
    "cluster's. Every table gives times divided by D. The CPU work of a step (DDP's bucket copies, the reductions, "
    "Python) is not dilated: it is tens of milliseconds per rank against seconds of dilated compute. Shared memory "
    "inside a node (several GB/s here) is not dilated either: it is already faster than dilated NVLink "
    "(600 GB/s / 400 = 1.5 GB/s), so the intra-node phases are, if anything, cheaper than on the real node. "
    "Latency is not dilated: a few tens of microseconds of veth latency stand for a tenth of a microsecond; the "
    "allreduce moves three buckets per step, so latency does not matter here.",
    "- **Layout.** Two ranks per emulated node stand for a node's eight GPUs: the bytes a node sends are "
    "2(N-1)/N·S for the hierarchical scheme and about 2·S for a flat ring whatever the ranks per node, and per "
    "rank the compute is the same.",
    "- **Backends.** hiercoll as it chooses (auto), forced hierarchical (`HIERCOLL_ALGO=hier`) and SageMaker's "
    "sharded reduction servers (`HIERCOLL_ALGO=sharded`); DDP's default allreduce on gloo (flat ring, TCP between "
    "all ranks); Open MPI 4.1's `MPI_Allreduce` from the DDP hook through mpi4py (shared memory inside a node: "
    "`vader,tcp,self`; `mpi_yield_when_idle 1`, as on an oversubscribed machine). All use DDP's 25 MB buckets and "
    "the same averaging hook.",
    ""]

if __name__ == "__main__":
    sys.exit(main())
