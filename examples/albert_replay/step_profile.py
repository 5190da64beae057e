"""A training step's compute as a list of units, each with its forward and backward time and the parameters it uses.

ALBERT's forward is a chain: embeddings -> embedding_hidden_mapping_in -> the one shared layer, called L times ->
the masked-LM head -> the loss. A profile lists those calls in forward order (the shared layer once per call), so a
replay can sleep through them in order and hand each parameter's gradient to autograd after the backward of the
parameter's *first* call in forward order: that is when a GPU's autograd has it complete, since the gradients of all
later calls are summed into it first. For ALBERT this means the shared layer's gradients (most of the model) and the
embeddings' (tied to the MLM decoder) are ready only at the very end of backward, which is why DDP can hide little
of ALBERT's allreduce behind backward.

Two sources of a profile:
- `Recorder`: hooks on a real model timing each call during real training (the CPU trainer's `--profile-out`), on
  the host's clock or, for a model on a GPU, on the GPU's (`CudaClock`: device_profile.py);
- `from_flops`: the FLOPs of each call, counted by torch.utils.flop_counter on the real model, over a stated
  accelerator throughput (peak TFLOPS x model FLOPs utilisation): for the GPUs we have no profile from.

The JSON file: {"source", "config", "batch", "seq_len", "units": [{"name", "forward_s", "backward_s", "params": [names
of the parameters the call uses]}], "optimizer_s", "data_s", "trace" (recorded profiles: every step's times), ...}; times are for one rank's step at
dilation 1.
"""
import json
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

# Published peak dense throughput (TFLOPS) of the accelerators of the seeds' instances, for the precision their
# ALBERT runs used (mixed precision on tensor cores): p4d's A100 (bf16/fp16, 312) and p3dn's V100 (fp16, 125).
PEAK_TFLOPS = {"a100": 312.0, "v100": 125.0}


class WallClock:
    """The host's clock: a CPU's step, where the host does the compute itself."""

    def now(self):
        return time.perf_counter()

    def settle(self):
        pass

    def seconds(self, stamp):
        return stamp


class CudaClock:
    """The GPU's clock: a stamp is an event recorded on the current stream, so the time between two stamps is how
    long the GPU took over the work enqueued between them, not how long the host took to enqueue it (the host runs
    ahead). Autograd runs a backward kernel on the stream its forward ran on, so hooks on either side of a unit's
    calls bracket the unit's kernels. `settle()` waits for the GPU; `seconds()` is then valid for earlier stamps."""

    def __init__(self):
        self.origin = self.now()

    def now(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def settle(self):
        torch.cuda.synchronize()

    def seconds(self, stamp):
        return self.origin.elapsed_time(stamp) / 1e3


def unit_modules(model):
    """The modules whose calls are the units of an AlbertForMaskedLM, in forward order (the shared layer listed once:
    it is called num_hidden_layers times)."""
    albert = model.albert
    layers = [layer for group in albert.encoder.albert_layer_groups for layer in group.albert_layers]
    return ([("embeddings", albert.embeddings), ("mapping_in", albert.encoder.embedding_hidden_mapping_in)] +
            [("layer" if len(layers) == 1 else f"layer{i}", layer) for i, layer in enumerate(layers)] +
            [("mlm_head", model.predictions)])


def parameter_names(model, module):
    ids = {id(p) for p in module.parameters()}
    return [name for name, p in model.named_parameters() if id(p) in ids]


class Recorder:
    """Times every unit call of a real model's training step, forward and backward.

    Forward: a unit runs from its pre-hook to the next unit's pre-hook (the first from the model's pre-hook, so the
    mask preparation before the embeddings counts); a final "loss" unit runs from the MLM head's return to the
    model's. Backward: a unit's backward starts when the gradient of its output exists (a hook on that tensor) and
    ends when the previous unit's starts; the first unit's ends with the last parameter gradient (hooks on the
    parameters), the loss's starts at `backward_started()`. Call `step_done()` after each step; `profile()` gives the
    mean of each unit over the recorded steps. `clock`: WallClock (the default) or CudaClock, whose stamps are
    resolved in step_done, after waiting for the GPU."""

    def __init__(self, model, clock=None):
        self.model = model
        self.clock = clock or WallClock()
        self.units = unit_modules(model)
        self.steps = []
        self.handles = [model.register_forward_pre_hook(self._model_pre), model.register_forward_hook(self._model_post)]
        for name, module in self.units:
            self.handles.append(module.register_forward_pre_hook(self._unit_pre(name)))
            self.handles.append(module.register_forward_hook(self._unit_post))
        for p in model.parameters():
            self.handles.append(p.register_hook(self._param_grad))
        self._reset()

    def _reset(self):
        self.calls = []  # (name, params, forward start, backward start)
        self.model_start = self.model_end = self.head_end = self.backward_start = None
        self.last_param_grad = None

    def _model_pre(self, module, args):
        self.model_start = self.clock.now()

    def _model_post(self, module, args, output):
        self.model_end = self.clock.now()

    def _unit_pre(self, name):
        def hook(module, args):
            self.calls.append([name, parameter_names(self.model, module), self.clock.now(), None])
        return hook

    def _unit_post(self, module, args, output):
        self.head_end = self.clock.now()
        call = self.calls[-1]
        tensor = output[0] if isinstance(output, tuple) else output
        if tensor.requires_grad:
            def grad_ready(grad, call=call):
                call[3] = self.clock.now()
            tensor.register_hook(grad_ready)

    def _param_grad(self, grad):
        self.last_param_grad = self.clock.now()

    def forward_called(self):
        self.forward_call = self.clock.now()

    def backward_started(self):
        self.backward_start = self.clock.now()

    def step_done(self, optimizer_s, data_s, step_s=None, comm_wait_s=None):
        """optimizer_s: from the end of backward to the end of the step; step_s, comm_wait_s: the whole step and
        its exposed communication, kept to show what the units leave out (DDP's own work before forward)."""
        self.clock.settle()
        at = self.clock.seconds
        calls = [[name, params, at(forward), at(backward)] for name, params, forward, backward in self.calls]
        model_start, model_end, head_end = at(self.model_start), at(self.model_end), at(self.head_end)
        backward_start, last_param_grad = at(self.backward_start), at(self.last_param_grad)
        forward_starts = [model_start] + [c[2] for c in calls[1:]] + [head_end]
        forward_ends = forward_starts[1:] + [model_end]
        backward_starts = [c[3] for c in calls] + [backward_start]
        backward_ends = [last_param_grad] + backward_starts[:-1]
        names = [c[0] for c in calls] + ["loss"]
        params = [c[1] for c in calls] + [[]]
        self.steps.append({"units": [{"name": n, "params": p, "forward_s": fe - fs, "backward_s": be - bs}
                                     for n, p, fs, fe, bs, be in zip(names, params, forward_starts, forward_ends,
                                                                     backward_starts, backward_ends)],
                           "optimizer_s": optimizer_s, "data_s": data_s, "step_s": step_s,
                           "pre_forward_s": model_start - at(self.forward_call),
                           "post_forward_s": backward_start - model_end,
                           "comm_wait_s": comm_wait_s})
        self._reset()

    def profile(self, skip=1, **info):
        """The mean of every unit's times over the recorded steps (the first `skip` left out: warm-up), and the
        steps themselves ("trace"), which a replay goes through in turn: a CPU's step times vary, and the slower
        rank of each step sets the pace, so means alone would replay a steadier job than the one recorded."""
        steps = self.steps[skip:] or self.steps
        units = [dict(u, forward_s=statistics.mean(s["units"][i]["forward_s"] for s in steps),
                      backward_s=statistics.mean(s["units"][i]["backward_s"] for s in steps))
                 for i, u in enumerate(steps[0]["units"])]
        mean = {key: statistics.mean(s[key] for s in steps)
                for key in ("optimizer_s", "data_s", "step_s", "comm_wait_s", "pre_forward_s", "post_forward_s")
                if steps[0].get(key) is not None}
        trace = [{"units": [[u["forward_s"], u["backward_s"]] for u in s["units"]], "optimizer_s": s["optimizer_s"],
                  "data_s": s["data_s"]} for s in steps]
        return dict(info, source="recorded", steps=len(steps), units=units, trace=trace,
                    **{("recorded_" + k if k in ("step_s", "comm_wait_s") else k): v for k, v in mean.items()})

    def close(self):
        for h in self.handles:
            h.remove()


def from_flops(model, batch, seq_len, accelerator, mfu, optimizer_s):
    """Unit times from counted FLOPs: one sequence's forward through the real model, counted per module by
    FlopCounterMode (matrix products and attention: what runs on tensor cores), scaled to the batch and divided by
    the accelerator's effective throughput. A module called several times (the shared layer) has its count divided
    among its calls. Backward is taken as twice the forward (a gradient for the input and one for the weights of
    every product), the usual rule; the embeddings' lookup has neither."""
    rate = PEAK_TFLOPS[accelerator] * 1e12 * mfu
    ids = torch.randint(5, model.config.vocab_size, (1, seq_len))
    calls, handles = [], []
    for name, module in unit_modules(model):
        handles.append(module.register_forward_pre_hook(lambda m, a: calls.append(m)))
    # Attention as eager matrix products while counting: FlopCounterMode does not count the CPU kernels of
    # scaled_dot_product_attention, which the model uses by default.
    implementation = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad(), FlopCounterMode(display=False, depth=None) as counter:
            model(input_ids=ids, labels=ids)
    finally:
        model.set_attn_implementation(implementation)
        for h in handles:
            h.remove()
    flops = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    top = type(model).__name__
    fqn = {id(m): f"{top}.{n}" for n, m in model.named_modules()}
    times = {id(m): calls.count(m) for m in calls}
    units, counted, seen = [], 0.0, {}
    for module in calls:
        seen[id(module)] = seen.get(id(module), 0) + 1
        name = dict((id(m), n) for n, m in unit_modules(model))[id(module)]
        if times[id(module)] > 1:
            name = f"{name}.{seen[id(module)] - 1}"
        f = flops.get(fqn[id(module)], 0) / times[id(module)] * batch
        counted += f
        units.append({"name": name, "params": parameter_names(model, module), "forward_s": f / rate,
                      "backward_s": 2 * f / rate})
    rest = max(flops.get(top, 0) * batch - counted, 0.0)  # the loss, and anything outside the units
    units.append({"name": "loss", "params": [], "forward_s": rest / rate, "backward_s": 2 * rest / rate})
    return {"source": f"flops: {accelerator} {PEAK_TFLOPS[accelerator]:g} TFLOPS peak x {mfu:g} utilisation, "
                      "backward = 2 x forward",
            "accelerator": accelerator, "mfu": mfu, "flops_per_step": 3 * flops.get(top, 0) * batch,
            "units": units, "optimizer_s": optimizer_s, "data_s": 0.0}


def save(profile, path):
    with open(path, "w") as f:
        json.dump(profile, f, indent=1)


def load(path):
    with open(path) as f:
        return json.load(f)


def scaled(profile, factor):
    """The profile with every time (units, optimizer, data, and each step of its trace) multiplied by `factor`: one
    device's recorded step at another's speed, at the same utilisation (e.g. an H200's bf16 profile on an A100:
    factor = 989 / 312, peak over peak)."""
    out = dict(profile, units=[dict(u, forward_s=u["forward_s"] * factor, backward_s=u["backward_s"] * factor)
                               for u in profile["units"]],
               optimizer_s=profile["optimizer_s"] * factor, data_s=profile["data_s"] * factor,
               source=f"{profile['source']}, times x {factor:.3g}")
    if profile.get("trace"):
        out["trace"] = [dict(step, units=[[f * factor, b * factor] for f, b in step["units"]],
                             optimizer_s=step["optimizer_s"] * factor, data_s=step["data_s"] * factor)
                        for step in profile["trace"]]
    return out


def by_kind(profile):
    """{unit kind: (forward_s, backward_s)} in forward order, a module's several calls summed (the shared layer's:
    "layer" in a recorded profile, "layer.3" in a FLOPs one)."""
    kinds = {}
    for u in profile["units"]:
        key = u["name"].split(".")[0]
        f, b = kinds.get(key, (0.0, 0.0))
        kinds[key] = (f + u["forward_s"], b + u["backward_s"])
    return kinds


def compute_s(profile):
    return sum(u["forward_s"] + u["backward_s"] for u in profile["units"]) + profile["optimizer_s"]
