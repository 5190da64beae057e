"""A recorded profile beside the FLOPs profile of the same model and step: where the replay's FLOPs-based compute
differs from what a device measured, unit by unit.

    python examples/albert_replay/compare_profiles.py examples/albert_replay/profiles/h200-base.json \
        --accelerator a100 --mfu 0.35 --scale 3.17

The FLOPs profile is step_profile.from_flops on the recorded profile's own model, batch and sequence length (the
replay's default: the accelerator's peak times --mfu, backward twice forward, 1 ms of optimizer). --scale multiplies
the recorded times first (step_profile.scaled: another accelerator's speed, e.g. an H200's profile at an A100's,
peak over peak). Prints a markdown table: per unit kind (the shared layer's calls summed), forward and backward in
ms from each, and the ratio, and the optimizer's step; then the totals, backward over forward, and the utilisation the recorded step implies
at the accelerator's peak.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "albert_hf"))
import step_profile  # noqa: E402
from train import build_model  # noqa: E402


def table(recorded, flops, accelerator):
    rec, est = step_profile.by_kind(recorded), step_profile.by_kind(flops)
    ms = 1e3
    lines = ["| unit | FLOPs-based forward (ms) | recorded forward (ms) | ratio | FLOPs-based backward (ms) | "
             "recorded backward (ms) | ratio |", "|---|---|---|---|---|---|---|"]

    def ratio(a, b):
        return f"{a / b:.2f}" if b > 0 else ""

    for kind in rec:
        (rf, rb), (ef, eb) = rec[kind], est.get(kind, (0.0, 0.0))
        lines.append(f"| {kind} | {ef * ms:.3f} | {rf * ms:.3f} | {ratio(rf, ef)} | {eb * ms:.3f} | {rb * ms:.3f} | "
                     f"{ratio(rb, eb)} |")
    rec_f, rec_b = sum(f for f, _ in rec.values()), sum(b for _, b in rec.values())
    est_f, est_b = sum(f for f, _ in est.values()), sum(b for _, b in est.values())
    lines.append(f"| **forward and backward** | {est_f * ms:.3f} | {rec_f * ms:.3f} | {ratio(rec_f, est_f)} | "
                 f"{est_b * ms:.3f} | {rec_b * ms:.3f} | {ratio(rec_b, est_b)} |")
    lines.append(f"| optimizer | {flops['optimizer_s'] * ms:.3f} | {recorded['optimizer_s'] * ms:.3f} | "
                 f"{ratio(recorded['optimizer_s'], flops['optimizer_s'])} | | | |")
    rec_total, est_total = step_profile.compute_s(recorded), step_profile.compute_s(flops)
    model_flops = flops["flops_per_step"]
    utilisation = model_flops / rec_total / (step_profile.PEAK_TFLOPS[accelerator] * 1e12)
    summary = {"recorded_ms": rec_total * ms, "flops_based_ms": est_total * ms,
               "backward_over_forward_recorded": rec_b / rec_f if rec_f else float("nan"),
               "utilisation_at_peak": utilisation}
    lines += ["", f"Step compute: recorded {rec_total * ms:.2f} ms against {est_total * ms:.2f} FLOPs-based "
              f"({rec_total / est_total:.2f}x); backward over forward {summary['backward_over_forward_recorded']:.2f} "
              f"recorded, 2.00 assumed; the recorded step is {utilisation:.1%} of the {accelerator}'s "
              f"{step_profile.PEAK_TFLOPS[accelerator]:g} TFLOPS peak ({model_flops / 1e9:.0f} GFLOP per step)."]
    return "\n".join(lines), summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", help="a recorded profile (device_profile.py, or train.py --profile-out)")
    p.add_argument("--accelerator", choices=sorted(step_profile.PEAK_TFLOPS), default="a100")
    p.add_argument("--mfu", type=float, default=0.35)
    p.add_argument("--optimizer-ms", type=float, default=1.0)
    p.add_argument("--scale", type=float, default=1.0, help="multiply the recorded times by this first")
    args = p.parse_args(argv)
    recorded = step_profile.load(args.profile)
    if args.scale != 1.0:
        recorded = step_profile.scaled(recorded, args.scale)
    model = build_model(recorded["config"], recorded["vocab_size"], recorded["seq_len"])
    flops = step_profile.from_flops(model, recorded["batch"], recorded["seq_len"], args.accelerator, args.mfu,
                                    args.optimizer_ms / 1e3)
    text, _ = table(recorded, flops, args.accelerator)
    print(f"{recorded['source']} against {flops['source']}; ALBERT-{recorded['config']}, {recorded['batch']} x "
          f"{recorded['seq_len']} per step.\n")
    print(text)


if __name__ == "__main__":
    main()
