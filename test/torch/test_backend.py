"""pytest suite of the torch.distributed backend: real processes, results checked against gloo and serial
references. Run with the Python that hiercoll_torch was built for, PYTHONPATH=<build>/python."""
import os
import pickle
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from launch import HERE, HeldStore, base_env, busy_loops, run_ranks


@pytest.mark.parametrize("size", [pytest.param(2, marks=pytest.mark.quick), 4])
def test_every_collective_matches_gloo_and_serial_reference(size):
    outputs = run_ranks(size, "worker_collectives.py")
    for out in outputs:
        assert " 0 failed" in out, out


@pytest.mark.parametrize("size", [pytest.param(2, marks=pytest.mark.quick), 4])
def test_bad_input_raises_and_group_survives(size):
    outputs = run_ranks(size, "worker_errors.py")
    assert all(": 0 problems" in out for out in outputs), outputs


@pytest.mark.parametrize("size,options", [pytest.param(2, "", marks=pytest.mark.quick), (4, ""), (2, "fp16"),
                                          (4, "allreduce"), (2, "static_graph"), (4, "find_unused"),
                                          (2, "bucket_view"), (4, "static_graph,bucket_view,allreduce"),
                                          (2, "powersgd"), (4, "powersgd"), (2, "sparse"), (4, "sparse")])
def test_ddp_training_matches_gloo(size, options, tmp_path):
    ours = _final_parameters(size, "worker_ddp.py", "hiercoll", tmp_path, [options])
    gloo = _final_parameters(size, "worker_ddp.py", "gloo", tmp_path, [options])
    _assert_same_parameters(ours, gloo, 1e-3 if "fp16" in options else 1e-5)
    _assert_replicas_identical(ours)  # DDP keeps replicas identical
    # The run trained: parameters moved away from the initial model.
    torch.manual_seed(0)
    initial = torch.nn.Embedding(50, 16).weight
    assert not torch.allclose(ours[0]["body.0.weight"], initial)
    if "find_unused" in options:
        torch.manual_seed(0)
        assert not torch.allclose(ours[0]["branch.weight"], torch.nn.Linear(50, 50).weight), "the branch trained"


@pytest.mark.parametrize("size", [2, 4])
def test_cuda_tensors_in_place(size):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: CUDA tensors are checked by scripts/dev/gpu-check on a GPU machine")
    outputs = run_ranks(size, "worker_cuda.py", timeout=600)
    for out in outputs:
        assert " 0 failed" in out, out


def test_torchrun_launch():
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun not installed")
    proc = subprocess.run(
        # --redirects/--tee 1: torch 1.13's torchrun cannot parse its default "0" under Python 3.11's enums. Port 0:
        # the rendezvous store binds one the kernel assigns (see launch.torchrun_command).
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=3", "--redirects=1", "--tee=1",
         "--rdzv_endpoint=127.0.0.1:0", "--rdzv_backend=c10d", os.path.join(HERE, "worker_launch.py")],
        env=base_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(f"rank {r} of 3 ok" in proc.stdout for r in range(3)), proc.stdout


def test_mpirun_launch():
    mpirun = shutil.which("mpirun") or pytest.skip("mpirun not installed")
    env = base_env()
    env.pop("MASTER_ADDR")  # hiercoll_torch.init_process_group derives it and MASTER_PORT (PMIx, or one node)
    forwarded = [arg for key in ["PYTHONPATH", "HIERCOLL_FABRIC_PROVIDER", "HIERCOLL_FABRIC_IFACE",
                                 "HIERCOLL_TIMEOUT_MS", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS"]
                 for arg in ("-x", key)]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    proc = subprocess.run(
        [mpirun, *root, "--oversubscribe", "-n", "2", *forwarded, sys.executable,
         os.path.join(HERE, "worker_launch.py")],
        env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert all(f"rank {r} of 2 ok" in proc.stdout for r in range(2)), proc.stdout


def _final_parameters(size, worker, backend, tmp_path, args):
    run_ranks(size, worker, [backend, tmp_path / backend, *args])
    return [torch.load(f"{tmp_path / backend}.{rank}") for rank in range(size)]


def _assert_replicas_identical(results, skip=()):
    """Every rank ends with rank 0's values, bit for bit (but for the entries in `skip`, each rank's own)."""
    for rank, state in enumerate(results):
        for name, value in state.items():
            if name not in skip:
                assert torch.equal(value, results[0][name]), f"rank {rank} {name} diverged from rank 0"


def _assert_same_parameters(ours, gloo, tol):
    for rank in range(len(gloo)):
        for name, value in gloo[rank].items():
            assert torch.allclose(ours[rank][name], value, rtol=tol, atol=tol), \
                f"rank {rank} {name} differs from gloo by {(ours[rank][name] - value).abs().max().item()}"


@pytest.mark.parametrize("size", [pytest.param(2, marks=pytest.mark.quick), 4])
def test_subgroups_split_and_monitored_barrier(size):
    # Within 45 s: the failed monitored barrier's unmatched messages must not hold destroy_process_group for the
    # group's 60 s timeout (they did, and every run took a minute).
    outputs = run_ranks(size, "worker_groups.py", timeout=45)
    assert all(" 0 failed" in out for out in outputs), outputs


@pytest.mark.parametrize("size,precision,divide", [(2, "fp32", ""), (4, "fp32", ""), (2, "bf16", ""),
                                                   (4, "fp32", "3")])
def test_fsdp2_and_its_distributed_checkpoint_match_gloo(size, precision, divide, tmp_path):
    # divide "3": FSDP2 reduce-scatters with PREMUL_SUM(1/3) instead of AVG.
    ours = _final_parameters(size, "worker_fsdp.py", "hiercoll", tmp_path, [precision, divide])
    gloo = _final_parameters(size, "worker_fsdp.py", "gloo", tmp_path, [precision, divide])
    _assert_same_parameters(ours, gloo, 1e-5 if precision == "fp32" else 1e-2)
    torch.manual_seed(0)
    initial = torch.nn.Embedding(64, 32).weight
    assert not torch.allclose(ours[0]["0.weight"], initial), "training did not move the parameters"
    # The Distributed Checkpoint round trip gives back exactly what was saved, with either backend.
    for name, results in (("hiercoll", ours), ("gloo", gloo)):
        for rank, state in enumerate(results):
            saved = [key for key in state if not key.startswith("restored ")]
            assert len(saved) == len(state) - len(saved) > 0
            for key in saved:
                assert torch.equal(state["restored " + key], state[key]), f"{name} rank {rank}: {key} not restored"


@pytest.mark.frameworks
def test_lightning_ddp_strategy_matches_gloo(tmp_path):
    pytest.importorskip("lightning")
    ours = _final_parameters(2, "worker_lightning.py", "hiercoll", tmp_path, [])
    gloo = _final_parameters(2, "worker_lightning.py", "gloo", tmp_path, [])
    _assert_same_parameters(ours, gloo, 1e-5)  # the parameters and the loss Lightning logged, averaged over ranks
    _assert_replicas_identical(ours)
    assert len(ours[0]["logged loss"]) == 16, "2 epochs of 8 steps (128 samples, 2 ranks, batches of 8)"
    torch.manual_seed(0)
    assert not torch.allclose(ours[0]["net.0.weight"], torch.nn.Linear(16, 32).weight), "training did not move it"


@pytest.mark.frameworks
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_matches_gloo(stage, tmp_path):
    pytest.importorskip("deepspeed")
    ours = _final_parameters(2, "worker_deepspeed.py", "hiercoll", tmp_path, [str(stage)])
    gloo = _final_parameters(2, "worker_deepspeed.py", "gloo", tmp_path, [str(stage)])
    _assert_same_parameters(ours, gloo, 1e-5)
    _assert_replicas_identical(ours)
    torch.manual_seed(0)
    assert not torch.allclose(ours[0]["0.weight"], torch.nn.Linear(16, 64).weight), "training did not move it"


def test_dtensor_2x2_mesh_matches_gloo(tmp_path):
    ours = _final_parameters(4, "worker_dtensor.py", "hiercoll", tmp_path, [])
    gloo = _final_parameters(4, "worker_dtensor.py", "gloo", tmp_path, [])
    _assert_same_parameters(ours, gloo, 1e-6)
    # The redistributions against the global tensor itself.
    torch.manual_seed(0)
    full = torch.randn(8, 6)
    for rank in range(4):
        dp, tp = divmod(rank, 2)
        assert torch.equal(ours[rank]["shard->replicate"], full)
        assert torch.equal(ours[rank]["local shard"], full[4 * dp:4 * dp + 4, 3 * tp:3 * tp + 3])
        assert torch.equal(ours[rank]["replicate->shard"], full[4 * tp:4 * tp + 4, 3 * dp:3 * dp + 3])
        assert torch.allclose(ours[rank]["sum over the tp dim"], full.sum(dim=1), atol=1e-6)


@pytest.mark.parametrize("size", [2, 4])
def test_hugging_face_albert_in_ddp_matches_gloo(size, tmp_path):
    pytest.importorskip("transformers")
    ours = _final_parameters(size, "worker_hf_albert.py", "hiercoll", tmp_path, [])
    gloo = _final_parameters(size, "worker_hf_albert.py", "gloo", tmp_path, [])
    _assert_same_parameters(ours, gloo, 1e-5)  # incl. every rank's loss curve
    _assert_replicas_identical(ours, skip={"losses"})
    from transformers import AlbertConfig, AlbertForMaskedLM
    torch.manual_seed(0)
    initial = AlbertForMaskedLM(AlbertConfig(vocab_size=120, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=64,
                                             max_position_embeddings=16)).state_dict()
    moved = [name for name, value in initial.items() if not torch.allclose(ours[0][name], value)]
    assert len(moved) > len(initial) // 2, f"training moved only {moved}"


@pytest.mark.parametrize("size", [2, 4])
def test_one_backend_per_device(size):
    # "cpu:hiercoll,cuda:nccl" is the usual mix; without a GPU gloo stands in for the CUDA side.
    other = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= size else "gloo"
    outputs = run_ranks(size, "worker_mixed.py", [other])
    assert all(": 0 failed" in out for out in outputs), outputs


@pytest.fixture(scope="module")
def emulated_cluster():
    """2 emulated nodes (scripts/emulation/cluster: network namespaces joined by veth) for mpirun across hosts."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("mpirun") or not shutil.which("unshare"):
        pytest.skip("emulated nodes need root, iproute2, unshare and mpirun")
    cluster = os.path.join(HERE, "..", "..", "scripts", "emulation", "cluster")
    subprocess.run([cluster, "up", "2"], check=True, capture_output=True)
    yield os.path.join(HERE, "..", "..", "scripts", "emulation", "mpirun-cluster")
    subprocess.run([cluster, "down"], check=True, capture_output=True)


def _mpirun_on_cluster(mpirun_cluster, script, args):
    # Neither MASTER_ADDR nor a store is given: the ranks agree on rank 0's address through PMIx.
    env = {k: v for k, v in base_env().items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    forwarded = [arg for key in ["PYTHONPATH", "HIERCOLL_TIMEOUT_MS", "OMP_NUM_THREADS"] for arg in ("-x", key)]
    proc = subprocess.run([mpirun_cluster, "2", "2", *forwarded, "--", sys.executable, os.path.join(HERE, script),
                           *map(str, args)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_mpirun_across_emulated_nodes(emulated_cluster):
    out = _mpirun_on_cluster(emulated_cluster, "worker_launch.py", [])
    assert all(f"rank {r} of 4 ok" in out for r in range(4)), out
    # Every rank used the address rank 0 published: the first node's NIC, not a hand-set one.
    assert out.count("MASTER_ADDR=10.77.0.1") == 4, out


@pytest.mark.parametrize("backend", ["hiercoll", "gloo"])
def test_error_texts_match_gloo(backend):
    """A timed-out barrier, failed monitored barriers and a dead peer raise what torch's tests expect of gloo."""
    # The groups' own timeouts, as gloo's: HIERCOLL_TIMEOUT_MS would override them.
    outputs = run_ranks(3, "worker_error_texts.py", [backend], env={"HIERCOLL_TIMEOUT_MS": None}, timeout=120)
    assert sum(": 0 problems" in out for out in outputs) == 2, outputs


def test_torch_own_distributed_tests_on_hiercoll():
    """A selection of PyTorch's own distributed tests (torch_suite.py: gloo's selection, every group on hiercoll):
    sparse allreduce, barrier timeouts and a monitored barrier with no time. Each spawns 2 ranks that must exit."""
    # HIERCOLL_TIMEOUT_MS unset: the tests' own group timeouts.
    env = base_env({"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), HERE])),
                    "HIERCOLL_TIMEOUT_MS": None})
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "torch_suite.py"), "-k", "test_sparse_all_reduce_sum", "-k",
         "test_barrier_timeout", "-k", "test_monitored_barrier_gloo_rank_0_timeout"],
        env=env, capture_output=True, text=True, timeout=300)
    summary = run.stdout + run.stderr
    assert run.returncode == 0 and "\nOK" in summary, summary[-4000:]
    # The selection's others skip (CUDA, file:// init, a world of 2, and in torch 2.15 an upstream-disabled one):
    # the three named above must have run.
    ran, skipped = re.search(r"Ran (\d+) tests?", summary), re.search(r"OK \(skipped=(\d+)\)", summary)
    assert ran and int(ran.group(1)) - int(skipped.group(1) if skipped else 0) == 3, summary[-4000:]


@pytest.mark.parametrize("size", [pytest.param(2, marks=pytest.mark.quick), 4])
def test_disagreeing_and_dead_peers_raise_at_once(size):
    outputs = run_ranks(size, "worker_failures.py", env={"HIERCOLL_TIMEOUT_MS": "120000"})
    assert sum(": 0 problems" in out for out in outputs) == size - 1, outputs
    assert any("exiting abruptly" in out for out in outputs), outputs


def _torch_at_least(major, minor):
    return tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (major, minor)


@pytest.mark.skipif(not _torch_at_least(2, 15), reason="torch attaches its flight recorder to custom backends from 2.15")
def test_flight_recorder_dumps_name_the_rank_that_stopped(tmp_path):
    """A 4-rank job where rank 2 stops calling collectives: every rank's torch flight record is dumped, the finished
    collectives read completed with durations, and torchfrtrace names rank 2 and the all_reduce it never called."""
    prefix = str(tmp_path / "rank_")
    env = {"TORCH_FR_DUMP_TEMP_FILE": prefix, "TORCH_FR_BUFFER_SIZE": None, "HIERCOLL_TIMEOUT_MS": None}
    outputs = run_ranks(4, "worker_flight.py", ["4"], env=env, timeout=120)
    for rank in (0, 1, 3):
        assert f"rank {rank}: failed" in outputs[rank], outputs
    import hiercoll_torch
    if hiercoll_torch._C.records_flight_natively:  # then torch attaches no hook of its own
        assert all(f"rank {rank}: recorded natively: True" in outputs[rank] for rank in range(4)), outputs
    assert "rank 2: record dumped: True" in outputs[2], outputs
    for rank in range(4):
        with open(f"{prefix}{rank}", "rb") as f:
            entries = pickle.load(f)["entries"]
        finished = [e for e in entries if e["profiling_name"] != "hiercoll:all_reduce" or e["collective_seq_id"] < 4]
        assert [e["profiling_name"] for e in finished] == ["hiercoll:all_reduce", "hiercoll:broadcast",
                                                           "hiercoll:all_reduce"], entries
        assert all(e["state"] == "completed" and e["duration_ms"] is not None for e in finished), entries
        assert len(entries) == (3 if rank == 2 else 4), entries
        if rank != 2:
            assert entries[-1]["state"] == "scheduled", entries  # issued, never completed
    trace = subprocess.run([os.path.join(os.path.dirname(sys.executable), "torchfrtrace"), str(tmp_path), "-p", "rank_"],
                           capture_output=True, text=True, timeout=120)
    assert trace.returncode == 0, trace.stdout[-3000:] + trace.stderr[-3000:]
    report = trace.stdout + trace.stderr
    assert "missing ranks: {2}" in report, report[-3000:]
    assert "collective: hiercoll:all_reduce" in report, report[-3000:]


def _serial_ddp_params(ranks_per_step):
    """What worker_elastic.py's and worker_shrink.py's model holds after one step per entry of `ranks_per_step`, each
    averaging that many ranks' gradients, computed in one process: {name: tensor}."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    for step, ranks in enumerate(ranks_per_step):
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
    return {name: p.detach() for name, p in model.named_parameters()}


def test_torchrun_restarts_a_ddp_job_after_a_crash(tmp_path):
    """torchrun --max-restarts 1, 3 ranks of DDP; the last crashes at step 3 while the others wait in the gradient
    allreduce. The agent's SIGTERM ends the survivors at once (no SIGKILL after its 30 s grace), the next attempt's
    processes start within 3 s of the crash (0.6-0.9 s with two busy loops beside), and it trains to the serial
    reference. The whole restart, crash to every rank of the next attempt initialized, took 4.2-4.9 s, most of it three
    interpreters importing torch (scripts/study/fault-times, docs/reliability.md); here, beside other tests, it must
    only end."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3", "--max-restarts", "1",
         "--monitor-interval", "0.1", os.path.join(HERE, "worker_elastic.py"), "hiercoll", str(tmp_path), "3", "6"],
        env=base_env(), capture_output=True, text=True, timeout=240)
    output = proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, output
    assert "forcefully exiting via 9" not in output, output
    died = float((tmp_path / "died").read_text())
    started = min(float((tmp_path / f"start.1.{r}").read_text()) for r in range(3))
    ready = max(float((tmp_path / f"ready.1.{r}").read_text()) for r in range(3))
    assert started - died < 3.0, f"the next attempt started {started - died:.2f} s after the crash\n{output}"
    assert ready - died < 30.0, f"the next attempt initialized {ready - died:.2f} s after the crash\n{output}"
    params = torch.load(tmp_path / "params")
    for name, want in _serial_ddp_params([3] * 6).items():
        torch.testing.assert_close(params[name], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("victim", [2, 0])
def test_every_survivor_of_a_killed_rank_raises_within_2_s(victim, tmp_path):
    """4 ranks in an all_reduce loop with torch's flight recorder attached as torch attaches it (its dump gathers stack
    traces for seconds): rank `victim` is SIGKILLed, rank 0 being the peer watch's hub; every survivor's call raises
    within 2 s naming it, the dump running beside."""
    outputs = run_ranks(4, "worker_kill.py", ["hiercoll", victim, tmp_path], env={"TORCH_FR_BUFFER_SIZE": None},
                        killed=(victim,), timeout=120)
    for rank in set(range(4)) - {victim}:
        m = re.search(r"noticed ([0-9.]+) \((.*)\)", outputs[rank])
        assert m, outputs
        assert float(m.group(1)) < 2.0, outputs
        assert f"rank {victim}" in m.group(2), outputs


@pytest.mark.skipif(not _torch_at_least(2, 15), reason="torch's reconfigure API came with 2.15")
@pytest.mark.parametrize("backend", ["hiercoll", "gloo"])
def test_reconfigure_contract_under_load_beside_gloo(backend, load_run, tmp_path, record_property):
    """The scenarios of PyTorch's test_c10d_fault_tolerance.py (3 ranks; configure, send/recv, shrink by the last or
    a middle rank, scale down and up, identity, late join, merge and split, after abort, reused uuid), plus a merge
    given as a set and, on hiercoll, the revoke after a timeout PyTorch tests on nccl2: each on every rank, with two
    busy loops beside the 3 ranks on this 2-core machine (issue 80's crashes came under load)."""
    # gloo's full-mesh connect fails now and then on a 2-core machine ("Connection closed by peer" while a peer is
    # still connecting): the reference gets a second run, counted in the report; hiercoll gets one.
    with busy_loops(2):
        for attempt in range(2 if backend == "gloo" else 1):
            try:
                outputs = run_ranks(3, "worker_reconfigure.py", [backend, tmp_path / str(attempt)], timeout=150)
                break
            except AssertionError:
                if backend != "gloo" or attempt == 1:
                    raise
    record_property("attempts", attempt + 1)
    scenarios = ["basic", "then_all_reduce", "then_send_recv", "shrink_last", "shrink_middle", "scale_down_up",
                 "single_to_all", "identity", "late_join", "merge_split", "merge_as_a_set", "after_abort",
                 "after_timeout", "rejects_reused_uuid"]
    for r, out in enumerate(outputs):
        for name in scenarios:
            outcome = "skipped" if (backend, name) == ("gloo", "after_timeout") else "ok"
            assert f"rank {r} scenario {name}: {outcome}" in out, out


@pytest.mark.skipif(not _torch_at_least(2, 15), reason="dist.shrink_group reaches custom backends from 2.15")
def test_shrink_after_a_sigkill_under_load_continues_ddp_as_the_serial_reference(load_run, tmp_path, record_property):
    """4 ranks train with DDP, two busy loops beside them; rank 3 is SIGKILLed at step 3; the survivors' step fails,
    they dist.shrink_group([3]) and train on to step 6. Their parameters equal a serial run: steps 0-2 averaging 4
    ranks' gradients, steps 3-5 averaging 3 ranks'. (gloo has no shrink: NCCL alone implements it in PyTorch.)"""
    kill_at, steps = 3, 6
    with busy_loops(2):
        outputs = run_ranks(4, "worker_shrink.py", [tmp_path / "params", kill_at, steps], killed=(3,), timeout=180)
    shrunk = []
    for rank in range(3):
        m = re.search(r"shrunk to 3 ranks ([0-9.]+) s after the death", outputs[rank])
        assert m, outputs
        shrunk.append(float(m.group(1)))
    record_property("shrunk_s", max(shrunk))  # read by scripts/study/fault-times
    want = _serial_ddp_params([4 if step < kill_at else 3 for step in range(steps)])
    for rank in range(3):
        got = torch.load(f"{tmp_path / 'params'}.{rank}")
        for name, value in got.items():
            assert torch.allclose(value, want[name], rtol=1e-5, atol=1e-6), \
                f"rank {rank} {name} differs from the serial reference by {(value - want[name]).abs().max().item()}"


@pytest.mark.skipif(not _torch_at_least(2, 15), reason="abort hooks reach custom backends from 2.15")
@pytest.mark.parametrize("leaver", [pytest.param(2, marks=pytest.mark.quick), 0])
def test_a_rank_that_destroyed_its_group_is_not_reported_dead(leaver, tmp_path):
    """destroy_process_group() says goodbye: rank `leaver` (0 serves the peer watch) leaves and exits while the others
    keep their group; theirs runs no abort hook and reports no error."""
    outputs = run_ranks(3, "worker_goodbye.py", [tmp_path, leaver], timeout=120)
    for rank in range(3):
        if rank != leaver:
            assert f"rank {rank}: 0 problems" in outputs[rank], outputs


@pytest.mark.quick
def test_sigterm_ends_a_rank_waiting_in_all_reduce_at_once():
    """torchrun and Slurm end a job with SIGTERM to each rank: a rank blocked in dist.all_reduce dies by it within 1 s,
    with no library's handler in between (libinfinipath's turned it into exit(1) under running threads)."""
    held = HeldStore()
    env = dict(base_env(held.env()), HIERCOLL_TIMEOUT_MS="60000", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "worker_signals.py")],
                              env=dict(env, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for r in range(2)]
    try:
        ready, _, _ = select.select([procs[0].stdout], [], [], 120)
        assert ready and procs[0].stdout.readline().startswith("waiting"), "rank 0 never reached its all_reduce"
        time.sleep(0.5)  # inside the call, its thread asleep in hiercoll
        start = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        code = procs[0].wait(timeout=10)
        took = time.monotonic() - start
        assert code == -signal.SIGTERM, f"rank 0 ended with {code}, not by SIGTERM"
        assert took < 1.0, f"rank 0 took {took:.2f} s to end after SIGTERM"
    finally:
        for p in procs:
            p.kill()
            p.wait()
