"""The DDP step replay (examples/albert_replay): its gradients reach DDP when real autograd's would, its FLOPs profile
is ALBERT's arithmetic, and 2-rank replays over hiercoll and gloo run DDP to the right averages; a profile recorded on
a device's clock (device_profile.py) accounts for the step and fits the replay's model."""
import json
import os
import subprocess
import sys
import time

import pytest
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "albert_replay")
sys.path.insert(0, EXAMPLE)
sys.path.insert(0, os.path.join(ROOT, "examples", "albert_hf"))
sys.path.insert(0, os.path.join(ROOT, "test", "torch"))
import replay  # noqa: E402
import step_profile  # noqa: E402
from launch import base_env, torchrun_command  # noqa: E402
from transformers import AlbertConfig, AlbertForMaskedLM  # noqa: E402

SMALL = dict(vocab_size=120, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
             intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)


def small_model(**overrides):
    torch.manual_seed(0)
    return AlbertForMaskedLM(AlbertConfig(**dict(SMALL, **overrides)))


def ready_after(model, run_backward, unit_outputs_hook):
    """{parameter name: how many unit backwards had started when its gradient was complete}."""
    started, ready = [0], {}
    unit_outputs_hook(lambda: started.__setitem__(0, started[0] + 1))
    for name, p in model.named_parameters():
        def note(grad, name=name):
            ready.setdefault(name, started[0])
        p.register_hook(note)
    run_backward()
    return ready


def record_steps(recorder, model, ids, steps, **step_done):
    """`steps` real forward and backward passes of `model` on `ids`, each told to `recorder` as a trainer does."""
    for _ in range(steps):
        recorder.forward_called()
        out = model(input_ids=ids, labels=ids)
        recorder.backward_started()
        out.loss.backward()
        model.zero_grad(set_to_none=True)
        recorder.step_done(**step_done)


def test_replay_hands_each_gradient_over_when_real_autograd_completes_it():
    # Reference: the real model's autograd, the shared layer called 3 times, the decoder tied to the embeddings.
    model = small_model()
    ids = torch.randint(5, 120, (2, 8))

    def real_hooks(on_start):
        def output_hook(module, args, output):
            output = output.loss if hasattr(output, "loss") else output  # the loss: its backward starts first
            (output[0] if isinstance(output, tuple) else output).register_hook(lambda grad: on_start())
        for _, module in step_profile.unit_modules(model) + [("model", model)]:
            module.register_forward_hook(output_hook)

    real = ready_after(model, lambda: model(input_ids=ids, labels=ids).loss.backward(), real_hooks)

    # The replay of the same model, from a profile the Recorder took of one real step.
    model = small_model()
    recorder = step_profile.Recorder(model)
    record_steps(recorder, model, ids, 1, optimizer_s=0.0, data_s=0.0)
    profile = recorder.profile(skip=0)
    recorder.close()
    assert [u["name"] for u in profile["units"]] == ["embeddings", "mapping_in", "layer", "layer", "layer",
                                                    "mlm_head", "loss"]
    assert all(u["forward_s"] >= 0 and u["backward_s"] >= 0 for u in profile["units"])
    replayed = replay.ReplayModel(model, profile, dilation=0.0, grad_value=1.0)
    original = replay.SleepThrough.backward

    def replay_hooks(on_start):
        def counting(ctx, grad):
            on_start()
            return original(ctx, grad)
        replay.SleepThrough.backward = staticmethod(counting)

    try:
        ready = ready_after(model, lambda: replayed(torch.zeros(1)).backward(), replay_hooks)
    finally:
        replay.SleepThrough.backward = original
    assert ready == real
    shared = [n for n in real if ".albert_layers.0." in n]
    assert shared and all(real[n] == 5 for n in shared)  # after the first layer call's backward (loss, head, 3 layers)
    assert all(p.grad is not None and torch.all(p.grad == 1.0) for p in model.parameters())


def albert_forward_flops(config, batch, seq):
    """ALBERT's forward matrix products by hand: per token, the mapping E->H, per layer Q, K, V, output (4 H^2),
    the feed-forward (2 H I) and attention (QK^T and AV: 2 S H), the head H->E and the decoder E->V; 2 FLOPs each."""
    e, h, i, v = config.embedding_size, config.hidden_size, config.intermediate_size, config.vocab_size
    per_token = e * h + config.num_hidden_layers * (4 * h * h + 2 * h * i + 2 * seq * h) + h * e + e * v
    return 2 * per_token * batch * seq


def test_flops_profile_is_albert_arithmetic():
    model = small_model()
    batch, seq = 3, 16
    profile = step_profile.from_flops(model, batch, seq, "a100", 0.5, optimizer_s=0.001)
    rate = step_profile.PEAK_TFLOPS["a100"] * 1e12 * 0.5
    forward = sum(u["forward_s"] for u in profile["units"]) * rate
    assert forward == pytest.approx(albert_forward_flops(model.config, batch, seq), rel=1e-6)
    assert all(u["backward_s"] == pytest.approx(2 * u["forward_s"]) for u in profile["units"])
    layers = [u for u in profile["units"] if u["name"].startswith("layer")]
    assert len(layers) == SMALL["num_hidden_layers"] and len({round(u["forward_s"], 15) for u in layers}) == 1
    assert step_profile.compute_s(profile) == pytest.approx(3 * forward / rate + 0.001)


def torchrun(args, ranks=2):
    env = {k: v for k, v in base_env({"HIERCOLL_TIMEOUT_MS": "120000"}).items() if not k.startswith("MASTER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "build", "python"),
                                                      env.get("PYTHONPATH")]))
    cmd = torchrun_command(os.path.join(EXAMPLE, "replay.py"), *args, ranks=ranks)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads([line for line in proc.stdout.splitlines() if '"summary": true' in line][-1])


@pytest.mark.parametrize("backend", ["hiercoll", "gloo"])
def test_two_ranks_replay_a_flops_profile(backend, tmp_path):
    # Each step checks every gradient is the ranks' average (replay.py raises otherwise).
    summary = torchrun(["--config", "tiny", "--vocab-size", "4000", "--batch", "4", "--dilation", "2000", "--steps",
                        "3", "--backend", backend, "--write-profile", tmp_path / "profile.json"])
    profile = step_profile.load(tmp_path / "profile.json")
    assert summary["backend"] == backend and summary["ranks"] == 2 and summary["steps_timed"] == 2
    assert summary["parameters"] == sum(p.numel() for p in replay.build_model("tiny", 4000, 128).parameters())
    # The sleeps are a floor: a step cannot be shorter than the profile's compute.
    assert summary["step_s"] >= step_profile.compute_s(profile)
    # DDP hands over its buckets only once backward's compute is nearly done: ALBERT's weights are shared.
    last_bucket_ms = max(ms for ms, mb in summary["bucket_handover_ms_mb"])
    assert last_bucket_ms >= summary["backward_compute_ms"] * 0.9
    assert sum(mb for ms, mb in summary["bucket_handover_ms_mb"]) == pytest.approx(summary["gradient_mb"], rel=0.01)


def test_two_ranks_replay_a_recorded_trace(tmp_path):
    # A profile recorded from real steps of the tiny model, replayed step by step on 2 ranks.
    model = replay.build_model("tiny", 4000, 32)
    recorder = step_profile.Recorder(model)
    record_steps(recorder, model, torch.randint(5, 4000, (2, 32)), 3,
                 optimizer_s=0.002, data_s=0.001, step_s=0.0, comm_wait_s=0.0)
    profile = recorder.profile(config="tiny", vocab_size=4000, seq_len=32, batch=2)
    assert len(profile["trace"]) == 2  # the first step is warm-up
    step_profile.save(profile, tmp_path / "recorded.json")
    # At twice the recorded times (--compute-scale: another accelerator's speed).
    summary = torchrun(["--profile", tmp_path / "recorded.json", "--steps", "3", "--backend", "hiercoll",
                        "--compute-scale", "2"])
    assert summary["profile"] == "recorded, times x 2 (its trace)" and summary["batch"] == 2
    assert summary["seq_len"] == 32
    assert summary["step_s"] >= 2 * min(step_profile.compute_s(dict(profile, units=[
        {"forward_s": f, "backward_s": b} for f, b in step["units"]], optimizer_s=step["optimizer_s"]))
        for step in profile["trace"])


class DeferredClock:
    """A clock like step_profile.CudaClock: its stamps are opaque (no arithmetic on them) and may be read only after
    a settle() that came after them, as a CUDA event's time is known only once the GPU got there."""

    class Stamp:
        def __init__(self, t):
            self._t, self.settled = t, False

    def __init__(self):
        self.pending = []

    def now(self):
        stamp = self.Stamp(time.perf_counter())
        self.pending.append(stamp)
        return stamp

    def settle(self):
        for stamp in self.pending:
            stamp.settled = True
        self.pending.clear()

    def seconds(self, stamp):
        assert stamp.settled, "a stamp read before the clock settled"
        return stamp._t


def test_recorder_reads_a_device_clock_only_after_settling():
    # The same steps recorded twice, on the host's clock and on a deferred one: the Recorder resolves every stamp
    # through the clock (a GPU's events cannot be subtracted), after settling, and both give a full account.
    ids = torch.randint(5, 4000, (2, 32))
    for clock in (step_profile.WallClock(), DeferredClock()):
        model = replay.build_model("tiny", 4000, 32)
        recorder = step_profile.Recorder(model, clock)
        record_steps(recorder, model, ids, 3, optimizer_s=0.0, data_s=0.0)
        profile = recorder.profile(config="tiny")
        assert [u["name"] for u in profile["units"]] == ["embeddings", "mapping_in"] + ["layer"] * 4 + \
            ["mlm_head", "loss"]
        assert all(u["forward_s"] > 0 and u["backward_s"] > 0 for u in profile["units"])


def test_scaled_profile_multiplies_every_time():
    profile = {"source": "recorded", "units": [{"name": "a", "params": [], "forward_s": 0.002, "backward_s": 0.004},
                                               {"name": "b", "params": [], "forward_s": 0.001, "backward_s": 0.003}],
               "optimizer_s": 0.0005, "data_s": 0.0001,
               "trace": [{"units": [[0.002, 0.004], [0.001, 0.003]], "optimizer_s": 0.0005, "data_s": 0.0001}]}
    out = step_profile.scaled(profile, 3.0)
    assert step_profile.compute_s(out) == pytest.approx(3.0 * step_profile.compute_s(profile))
    assert out["data_s"] == pytest.approx(0.0003)
    assert out["trace"][0]["units"] == [pytest.approx([0.006, 0.012]), pytest.approx([0.003, 0.009])]
    assert out["trace"][0]["optimizer_s"] == pytest.approx(0.0015)
    assert profile["units"][0]["forward_s"] == 0.002  # the original is left as it was
    assert out["source"].startswith("recorded")


def test_device_profile_accounts_for_the_step_and_fits_the_replay(tmp_path):
    out = tmp_path / "profile.json"
    subprocess.run([sys.executable, os.path.join(EXAMPLE, "device_profile.py"), "--device", "cpu", "--amp", "none",
                    "--config", "tiny", "--batch", "2", "--seq-len", "32", "--vocab-size", "4000", "--warmup", "1",
                    "--steps", "3", "--profiler-steps", "1", "--out", str(out)], check=True, timeout=300,
                   stdout=subprocess.PIPE)
    profile = step_profile.load(out)
    assert profile["device"] == "cpu" and profile["steps"] == 3 and len(profile["trace"]) == 3
    # The units partition the step: forward from the model's start to its end, backward from its start to the last
    # gradient, then the optimizer; what is left is the hooks' own gaps (the call into the model, the return from
    # backward), small beside the step.
    accounted = step_profile.compute_s(profile) + profile["pre_forward_s"] + profile["post_forward_s"]
    assert profile["recorded_step_s"] * 0.95 <= accounted <= profile["recorded_step_s"] * 1.0001
    assert profile["optimizer_s"] > 0 and profile["data_s"] == 0
    # The FLOPs are those of the replay's FLOPs profile for the same model and batch.
    model = replay.build_model("tiny", 4000, 32)
    assert profile["flops_per_step"] == step_profile.from_flops(model, 2, 32, "a100", 1.0, 0.0)["flops_per_step"]
    # torch.profiler's second account: the operators' time in a step is less than the step.
    assert 0 < profile["profiler"]["operator_s"] <= profile["profiler"]["step_s"]
    # The replay takes it: every parameter in a unit (ReplayModel refuses a profile that does not fit the model).
    replay.ReplayModel(model, profile, 1.0, grad_value=1.0)


def test_device_operator_time_counts_each_kernel_once():
    # torch.profiler's averages on a GPU: an operator's self device time is its kernels' time again, so the total
    # comes from the device's own events and the operators only rank.
    import device_profile
    from types import SimpleNamespace as Event

    events = [Event(key="aten::mm", self_device_time_total=300.0, device_type="DeviceType.CPU"),
              Event(key="aten::add", self_device_time_total=100.0, device_type="DeviceType.CPU"),
              Event(key="sm90_gemm_kernel", self_device_time_total=300.0, device_type="DeviceType.CUDA"),
              Event(key="elementwise_kernel", self_device_time_total=100.0, device_type="DeviceType.CUDA"),
              Event(key="Memcpy HtoD", self_device_time_total=20.0, device_type="DeviceType.CUDA")]
    profiler = Event(key_averages=lambda: events)
    total, top = device_profile.operator_s(profiler, 2, on_device=True)
    assert total == pytest.approx(420e-6 / 2)
    assert top == [["aten::mm", pytest.approx(150e-6)], ["aten::add", pytest.approx(50e-6)]]


def test_compare_profiles_against_flops_reads_a_known_difference():
    # A "recorded" profile that is the FLOPs profile at half the speed: every unit's ratio reads 2.00, backward over
    # forward stays the FLOPs profile's 2, and the utilisation halves.
    import compare_profiles

    model = replay.build_model("tiny", 4000, 32)
    flops = step_profile.from_flops(model, 2, 32, "a100", 0.35, 0.001)
    recorded = step_profile.scaled(dict(flops, source="recorded"), 2.0)
    text, summary = compare_profiles.table(recorded, flops, "a100")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| layer |")]
    assert rows and rows[0][3] == "2.00" and rows[0][6].rstrip(" |") == "2.00"
    assert summary["recorded_ms"] == pytest.approx(2 * summary["flops_based_ms"])
    assert summary["backward_over_forward_recorded"] == pytest.approx(2.0)
    assert summary["utilisation_at_peak"] == pytest.approx(
        flops["flops_per_step"] / (2 * step_profile.compute_s(flops)) / 312e12)
