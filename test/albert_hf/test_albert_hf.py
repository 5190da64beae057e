"""The Hugging Face ALBERT trainers (examples/albert_hf) on 2 ranks of this host: the loss falls, hiercoll, gloo and
Open MPI give the same loss curve from the same seed, a resumed run continues the uninterrupted one exactly, and
Hugging Face's Trainer trains on a hiercoll group."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "albert_hf")
SMALL = ["--seq-len", "64", "--batch", "8"]
sys.path.insert(0, os.path.join(ROOT, "test", "torch"))
from launch import base_env, torchrun_command  # noqa: E402  (the torch tests' launcher environment)


def env():
    # torchrun brings its own rendezvous; under mpirun the ranks agree on one through PMIx.
    return {k: v for k, v in base_env({"HIERCOLL_TIMEOUT_MS": "120000"}).items() if not k.startswith("MASTER_")}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The default corpus (Debian's King James Bible), made by prepare-corpus unless the build or gpu-check has it."""
    for path in [os.environ.get("ALBERT_CORPUS", ""), os.path.join(ROOT, "build", "data", "kjv.txt"),
                 os.path.join(ROOT, ".debs", "kjv.txt")]:
        if path and os.path.exists(path):
            return path
    out = tmp_path_factory.mktemp("corpus") / "kjv.txt"
    subprocess.run([os.path.join(ROOT, "examples", "albert_mlm", "prepare-corpus"), str(out)], check=True)
    return str(out)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, corpus):
    """One tokenizer for every run (trained by the first)."""
    return str(tmp_path_factory.mktemp("tokenizer") / "spm")


def torchrun(script, args, ranks=2, timeout=600):
    cmd = torchrun_command(os.path.join(EXAMPLE, script), *args, ranks=ranks)
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def records(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return [r for r in lines if not r.get("summary")], [r for r in lines if r.get("summary")]


def train(out_dir, corpus, tokenizer, backend, *extra):
    torchrun("train.py", ["--corpus", corpus, "--tokenizer", tokenizer, "--out", out_dir, "--backend", backend,
                          "--log-every", "1", *SMALL, *extra])
    return records(out_dir)


def curve(steps):
    return torch.tensor([r["loss"] for r in steps], dtype=torch.float64)


def test_loss_falls_and_hiercoll_matches_gloo(tmp_path, corpus, tokenizer):
    # 100 steps: the mean loss of the last 10 is 2.46 below the first 10's by then, and no lower at 200 (2.39).
    runs = {b: train(str(tmp_path / b), corpus, tokenizer, b, "--steps", "100") for b in ["hiercoll", "gloo"]}
    hiercoll, gloo = curve(runs["hiercoll"][0]), curve(runs["gloo"][0])
    assert len(hiercoll) == 100 and len(gloo) == 100
    assert hiercoll[:10].mean() - hiercoll[-10:].mean() > 1.0, hiercoll
    torch.testing.assert_close(hiercoll, gloo, rtol=1e-4, atol=0)
    summary = runs["hiercoll"][1][-1]
    assert summary["backend"] == "hiercoll" and summary["ranks"] == 2 and summary["steps"] == 100
    assert summary["samples_per_s"] > 0 and summary["comm_wait_s"] >= 0


@pytest.fixture(scope="module")
def whole(tmp_path_factory, corpus, tokenizer):
    """A 30-step hiercoll run, uninterrupted: the reference of the resumed and the interleaved runs."""
    out = str(tmp_path_factory.mktemp("whole"))
    steps, summaries = train(out, corpus, tokenizer, "hiercoll", "--steps", "30")
    return out, steps, summaries


def test_resume_continues_the_uninterrupted_run(tmp_path, corpus, tokenizer, whole):
    whole_dir, whole, _ = whole
    parts = str(tmp_path / "parts")
    train(parts, corpus, tokenizer, "hiercoll", "--steps", "30", "--stop-after", "12")
    # Resumed with loader workers: the batches and masks do not depend on who makes them.
    resumed, _ = train(parts, corpus, tokenizer, "hiercoll", "--steps", "30", "--resume", "--num-workers", "2")
    assert [r["step"] for r in resumed] == list(range(1, 13)) + list(range(13, 31))
    torch.testing.assert_close(curve(resumed), curve(whole), rtol=1e-6, atol=0)
    a = torch.load(os.path.join(whole_dir, "checkpoint.pt"), weights_only=False)["model"]
    b = torch.load(os.path.join(parts, "checkpoint.pt"), weights_only=False)["model"]
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=1e-7, msg=name)


def test_interleaved_backends_each_average_their_own_steps(tmp_path, corpus, tokenizer, whole):
    """--interleave gloo: even steps through hiercoll's DDP wrapper, odd ones through gloo's, over one model. The
    curve is the uninterrupted hiercoll run's (every step averaged once), each backend's hook ran on its own steps
    only, and each summary times its own."""
    _, reference, reference_summaries = whole
    out = str(tmp_path / "interleaved")
    steps, summaries = train(out, corpus, tokenizer, "hiercoll", "--steps", "30", "--interleave", "gloo",
                             "--timeline-out", os.path.join(out, "timeline-{rank}.json"))
    torch.testing.assert_close(curve(steps), curve(reference), rtol=1e-4, atol=0)
    by_backend = {s["backend"]: s for s in summaries}
    assert sorted(by_backend) == ["gloo", "hiercoll"], summaries
    # Step 0 (hiercoll's) is not timed: 14 timed steps of hiercoll's, 15 of gloo's.
    assert (by_backend["hiercoll"]["timed_steps"], by_backend["gloo"]["timed_steps"]) == (14, 15)
    assert all(s["samples_per_s"] > 0 and s["interleaved"] == ["hiercoll", "gloo"] for s in summaries)
    # Hooks: as many bucket allreduces in all as the run on hiercoll alone made, split between the two.
    alone = reference_summaries[-1]["allreduces"]
    assert by_backend["hiercoll"]["allreduces"] + by_backend["gloo"]["allreduces"] == alone
    assert by_backend["gloo"]["allreduces"] >= 15 and by_backend["hiercoll"]["allreduces"] >= 15
    for rank in range(2):
        with open(os.path.join(out, f"timeline-{rank}.json")) as f:
            timeline = json.load(f)["steps"]
        assert [t["backend"] for t in timeline] == ["hiercoll", "gloo"] * 15
        # Each step's last hand-over came from that step's backend, after the step before it ended.
        assert all(t["handover"] > p["backward_end"] for p, t in zip(timeline, timeline[1:]))


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path, corpus, tokenizer, whole):
    out = str(tmp_path / "run")
    shutil.copytree(whole[0], out)  # a checkpoint of batch 8, resumed at batch 4
    cmd = torchrun_command(os.path.join(EXAMPLE, "train.py"), "--corpus", corpus, "--tokenizer", tokenizer, "--out",
                           out, "--steps", "8", "--resume", "--seq-len", "64", "--batch", "4")
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "different run" in proc.stderr and "'batch': (8, 4)" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun")
def test_open_mpi_averaging_matches_hiercoll(tmp_path, corpus, tokenizer, whole):
    """--backend mpi: gradients summed by Open MPI's MPI_Allreduce (mpi4py) from the DDP hook, launched by mpirun;
    the same 30 steps from the same seed as the uninterrupted hiercoll run under torchrun."""
    out = str(tmp_path / "mpi")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp",
           "--mca", "btl_tcp_if_include", "lo", sys.executable, os.path.join(EXAMPLE, "train.py"), "--corpus", corpus,
           "--tokenizer", tokenizer, "--out", out, "--backend", "mpi", "--steps", "30", "--log-every", "1", *SMALL]
    # stdin closed: mpirun forwards it to rank 0, and reading a terminal from the background stops the job.
    proc = subprocess.run(cmd, env=env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    steps, summaries = records(out)
    assert summaries[-1]["backend"].startswith("mpi")
    torch.testing.assert_close(curve(steps), curve(whole[1]), rtol=1e-4, atol=0)


def test_hugging_face_trainer_trains_on_a_hiercoll_group(tmp_path, corpus, tokenizer):
    summaries, weights = {}, {}
    for backend in ["hiercoll", "gloo"]:
        out = str(tmp_path / backend)
        stdout = torchrun("train_trainer.py", ["--corpus", corpus, "--tokenizer", tokenizer, "--out", out,
                                               "--backend", backend, "--steps", "40", "--save-model", *SMALL])
        summaries[backend] = [json.loads(line) for line in stdout.splitlines() if '"summary"' in line][-1]
        weights[backend] = [torch.load(os.path.join(out, f"weights.{r}.pt")) for r in range(2)]
    ours = summaries["hiercoll"]
    # Trainer wrapped the model in DDP over the group made before it: hiercoll's.
    assert ours["ddp"] == "DistributedDataParallel" and ours["group_backend"] == "hiercoll", ours
    assert ours["steps"] == 40 and ours["losses"][0] - min(ours["losses"][-5:]) > 1.0, ours
    torch.testing.assert_close(torch.tensor(ours["losses"]), torch.tensor(summaries["gloo"]["losses"]), rtol=1e-4,
                               atol=0)
    for name, value in weights["hiercoll"][0].items():
        torch.testing.assert_close(weights["hiercoll"][1][name], value, msg=name)  # replicas agree
        torch.testing.assert_close(value, weights["gloo"][0][name], rtol=1e-4, atol=1e-5, msg=name)
