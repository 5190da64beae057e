"""Every collective of the hiercoll backend, on every rank, against gloo on the same inputs and against a
serial reference each rank computes from all ranks' inputs (which it can regenerate from their seeds)."""
import os
import sys

import faulthandler
import torch
import torch.distributed as dist

import hiercoll_torch  # noqa: F401  (registers the backend)

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 4e-2}
failures = []
checked = 0


def data(rank, numel, dtype, salt=0, small=False):
    """Rank `rank`'s input: the same on whichever process makes it."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * numel + salt)
    if dtype.is_floating_point:
        return (torch.rand(numel, generator=g, dtype=torch.float64) * 2 + 0.5).to(dtype)
    low, high = (1, 3) if small else (0 if dtype == torch.uint8 else -20, 20)
    return torch.randint(low, high, (numel,), generator=g, dtype=torch.int64).to(dtype)


def reduce_all(tensors, op):
    wide = torch.stack([t.to(torch.float64 if t.dtype.is_floating_point else torch.int64) for t in tensors])
    if op == "sum":
        out = wide.sum(0)
    elif op == "avg":
        out = wide.sum(0) / len(tensors)
    elif op == "prod":
        out = wide.prod(0)
    elif op == "min":
        out = wide.min(0).values
    else:
        out = wide.max(0).values
    return out.to(tensors[0].dtype)


TORCH_OP = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX}
if hasattr(dist.ReduceOp, "AVG"):
    TORCH_OP["avg"] = dist.ReduceOp.AVG


def check(what, got, expected):
    global checked
    checked += 1
    if got.dtype != expected.dtype or got.shape != expected.shape:
        failures.append(f"{what}: got {got.dtype} {tuple(got.shape)}, expected {expected.dtype} {tuple(expected.shape)}")
        return
    if got.dtype.is_floating_point:
        tol = TOLERANCE[got.dtype]
        ok = torch.allclose(got.double(), expected.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, expected)
    if not ok:
        diff = (got.double() - expected.double()).abs()
        failures.append(f"{what}: max difference {diff.max().item()} at {diff.argmax().item()}")


def with_gloo(what, fn, expected_from_hiercoll):
    """Runs the same call on the gloo group; compares where gloo supports it (else the serial check stands)."""
    try:
        result = fn(GLOO)
    except RuntimeError as e:
        if "not supported" in str(e) or "Unsupported" in str(e) or "does not support" in str(e):
            return
        raise
    check(what + " vs gloo", expected_from_hiercoll, result)


def both(fn):
    return fn(None), fn


def test_all_reduce(numel):
    for dtype in FLOATS + INTS:
        for op in TORCH_OP:
            if op == "avg" and not dtype.is_floating_point:
                continue
            small = op == "prod"
            inputs = [data(r, numel, dtype, 1, small) for r in range(SIZE)]

            def run(group, async_op=False):
                t = inputs[RANK].clone()
                work = dist.all_reduce(t, op=TORCH_OP[op], group=group, async_op=async_op)
                if async_op:
                    value = work.get_future().wait()[0]
                    work.wait()
                    assert value.data_ptr() == t.data_ptr(), "the future holds the reduced tensor itself"
                return t

            ours = run(None, async_op=(numel % 2 == 1))
            check(f"all_reduce {op} {dtype} n={numel}", ours, reduce_all(inputs, op))
            if op != "avg" and dtype not in (torch.bfloat16,):
                with_gloo(f"all_reduce {op} {dtype} n={numel}", run, ours)


def test_sparse_all_reduce():
    """Sparse COO tensors (DDP's gradients of nn.Embedding(sparse=True)): summed as gloo sums them. Entries differ
    by rank and some coincide, one rank has none; with and without a dense trailing dimension; async too."""
    for dense_dims in [(), (3,)]:
        shape = (10, 6) + dense_dims

        def sparse_input(r):
            g = torch.Generator().manual_seed(7 + r)
            nnz = 0 if r == SIZE - 1 else 3 + 2 * r
            indices = torch.stack([torch.randint(0, 10, (nnz,), generator=g), torch.randint(0, 6, (nnz,), generator=g)])
            values = torch.randint(-5, 6, (nnz,) + dense_dims, generator=g).float()
            return torch.sparse_coo_tensor(indices, values, shape)

        inputs = [sparse_input(r) for r in range(SIZE)]

        def run(group, async_op=False):
            t = inputs[RANK].clone()
            work = dist.all_reduce(t, group=group, async_op=async_op)
            if async_op:
                work.wait()
            return t.coalesce()

        ours = run(None, async_op=bool(dense_dims))
        what = f"sparse all_reduce dense dims {dense_dims}"
        check(what, ours.to_dense(), sum(i.to_dense() for i in inputs))
        theirs = run(GLOO)
        check(what + " indices vs gloo", ours.indices(), theirs.indices())
        check(what + " values vs gloo", ours.values(), theirs.values())


def test_all_reduce_coalesced():
    shapes = [(3, 4), (17,), (2, 2, 5)]
    inputs = [[data(r, int(torch.tensor(s).prod()), torch.float32, i).view(s) for i, s in enumerate(shapes)]
              for r in range(SIZE)]
    mine = [t.clone() for t in inputs[RANK]]
    dist.all_reduce_coalesced(mine)
    for i in range(len(shapes)):
        check(f"all_reduce_coalesced tensor {i}", mine[i], reduce_all([inputs[r][i] for r in range(SIZE)], "sum"))


def test_broadcast_and_reduce(numel):
    for dtype in [torch.float32, torch.int64, torch.bfloat16, torch.bool]:
        for root in range(SIZE):
            src = data(root, numel, torch.int64 if dtype == torch.bool else dtype, 2)
            src = (src % 2).bool() if dtype == torch.bool else src
            t = src.clone() if RANK == root else torch.zeros_like(src)
            dist.broadcast(t, root)
            check(f"broadcast {dtype} root={root} n={numel}", t, src)

            inputs = [data(r, numel, torch.float32, 3) for r in range(SIZE)]
            t = inputs[RANK].clone()
            dist.reduce(t, root, op=dist.ReduceOp.MAX)
            if RANK == root:
                check(f"reduce max root={root} n={numel}", t, reduce_all(inputs, "max"))
            if dtype == torch.float32 and numel > 0:
                g = inputs[RANK].clone()
                dist.reduce(g, root, op=dist.ReduceOp.MAX, group=GLOO)
                if RANK == root:
                    check(f"reduce max root={root} vs gloo", t, g)


def test_all_gather(numel):
    for dtype in [torch.float32, torch.float16, torch.int32, torch.uint8]:
        inputs = [data(r, numel, dtype, 4) for r in range(SIZE)]

        def run(group):
            outs = [torch.empty(numel, dtype=dtype) for _ in range(SIZE)]
            dist.all_gather(outs, inputs[RANK], group=group)
            return torch.stack(outs)

        ours = run(None)
        check(f"all_gather {dtype} n={numel}", ours, torch.stack(inputs))
        if numel > 0:  # gloo's allgather of empty tensors dies with SIGFPE (torch 1.13)
            with_gloo(f"all_gather {dtype} n={numel}", run, ours)

        flat = torch.empty(SIZE * numel, dtype=dtype)
        gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        gather_into(flat, inputs[RANK])
        check(f"all_gather_into_tensor {dtype} n={numel}", flat, torch.cat(inputs))


def test_gather_scatter(numel):
    for root in range(SIZE):
        inputs = [data(r, numel, torch.float64, 5) for r in range(SIZE)]
        outs = [torch.empty(numel, dtype=torch.float64) for _ in range(SIZE)] if RANK == root else None
        dist.gather(inputs[RANK], outs, dst=root)
        if RANK == root:
            check(f"gather root={root} n={numel}", torch.stack(outs), torch.stack(inputs))
        if hasattr(dist, "gather_single"):  # torch 2.14+: one flat output on the root (Backend::gather_into_tensor)
            flat = torch.full((SIZE, numel), -1.0, dtype=torch.float64) if RANK == root else None
            dist.gather_single(inputs[RANK], flat, dst=root)
            if RANK == root:
                check(f"gather_single root={root} n={numel}", flat, torch.stack(inputs))

        pieces = [data(root, numel, torch.int32, 6 + r) for r in range(SIZE)]
        out = torch.empty(numel, dtype=torch.int32)
        dist.scatter(out, pieces if RANK == root else None, src=root)
        check(f"scatter root={root} n={numel}", out, pieces[RANK])


def test_reduce_scatter(numel):
    for dtype in [torch.float32, torch.float64, torch.int64, torch.bfloat16]:
        for op in ["sum", "max", "min"]:
            inputs = [[data(r, numel, dtype, 7 + j) for j in range(SIZE)] for r in range(SIZE)]
            out = torch.empty(numel, dtype=dtype)
            dist.reduce_scatter(out, [t.clone() for t in inputs[RANK]], op=TORCH_OP[op])
            expected = reduce_all([inputs[r][RANK] for r in range(SIZE)], op)
            check(f"reduce_scatter {op} {dtype} n={numel}", out, expected)

            flat_in = torch.cat(inputs[RANK])
            out2 = torch.empty(numel, dtype=dtype)
            scatter_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
            scatter_tensor(out2, flat_in, op=TORCH_OP[op])
            check(f"reduce_scatter_tensor {op} {dtype} n={numel}", out2, expected)


def test_all_to_all(rows):
    width = 3
    # Even split.
    inputs = [data(r, SIZE * rows * width, torch.float32, 9).view(SIZE * rows, width) for r in range(SIZE)]

    def run_even(group):
        out = torch.empty(SIZE * rows, width)
        dist.all_to_all_single(out, inputs[RANK], group=group)
        return out

    ours = run_even(None)
    expected = torch.cat([inputs[r].view(SIZE, rows, width)[RANK] for r in range(SIZE)])
    check(f"all_to_all_single even rows={rows}", ours, expected)
    with_gloo(f"all_to_all_single even rows={rows}", run_even, ours)

    # Uneven: rank r sends (r + j) % 3 rows to rank j.
    def send_rows(r, j):
        return (r + j + rows) % 3

    uneven = [data(r, sum(send_rows(r, j) for j in range(SIZE)) * width, torch.int64, 10).view(-1, width)
              for r in range(SIZE)]
    in_splits = [send_rows(RANK, j) for j in range(SIZE)]
    out_splits = [send_rows(j, RANK) for j in range(SIZE)]

    def run_uneven(group):
        out = torch.empty(sum(out_splits), width, dtype=torch.int64)
        dist.all_to_all_single(out, uneven[RANK], out_splits, in_splits, group=group)
        return out

    ours = run_uneven(None)
    expected = torch.cat([uneven[r].split([send_rows(r, j) for j in range(SIZE)])[RANK] for r in range(SIZE)])
    check(f"all_to_all_single uneven rows={rows}", ours, expected)
    with_gloo(f"all_to_all_single uneven rows={rows}", run_uneven, ours)

    # List form.
    pieces = [[data(r, j + 1, torch.float64, 11) for j in range(SIZE)] for r in range(SIZE)]
    outs = [torch.empty(RANK + 1, dtype=torch.float64) for _ in range(SIZE)]
    dist.all_to_all(outs, pieces[RANK])
    for j in range(SIZE):
        check(f"all_to_all from {j}", outs[j], pieces[j][RANK])


def test_send_recv():
    # A ring shift, posted both ways at once (isend then irecv on every rank) and with user tags.
    for tag in (0, 5):
        numel = 1000 + tag
        mine = data(RANK, numel, torch.float32, 12 + tag)
        got = torch.empty(numel)
        send = dist.isend(mine, (RANK + 1) % SIZE, tag=tag)
        recv = dist.irecv(got, (RANK - 1) % SIZE, tag=tag)
        recv.wait()
        send.wait()
        check(f"send/recv ring tag={tag}", got, data((RANK - 1) % SIZE, numel, torch.float32, 12 + tag))
    # From any source: rank 0 receives one message from every other rank in arrival order; recv returns the sender.
    if RANK == 0:
        senders = []
        for _ in range(SIZE - 1):
            got = torch.zeros(77, dtype=torch.int32)
            src = dist.recv(got, tag=9)
            senders.append(src)
            check(f"recv from any source (sender {src})", got, data(src, 77, torch.int32, 14))
        check("recv from any source: every sender once", torch.tensor(sorted(senders)), torch.arange(1, SIZE))
        work = dist.irecv(got, tag=10)  # irecv without src, then the sender from the Work
        work.wait()
        check("irecv from any source: Work's source rank", torch.tensor([work._source_rank()]), torch.tensor([SIZE - 1]))
    else:
        dist.send(data(RANK, 77, torch.int32, 14), 0, tag=9)
        if RANK == SIZE - 1:
            dist.send(data(RANK, 77, torch.int32, 14), 0, tag=10)


def test_premul_sum_and_avg():
    """PREMUL_SUM and AVG, what FSDP2 reduce-scatters gradients with, on every floating dtype."""
    numel = 1000
    for dtype in FLOATS:
        inputs = [data(r, SIZE * numel, dtype, 13) for r in range(SIZE)]
        for factor in (0.25, torch.tensor(0.5, dtype=torch.float64)):
            op = dist._make_nccl_premul_sum(factor)
            f = float(factor)
            expected = reduce_all([(x.double() * f).to(dtype) for x in inputs], "sum")
            t = inputs[RANK].clone()
            dist.all_reduce(t, op=op)
            check(f"all_reduce premul_sum {dtype} factor={f}", t, expected)
            # gloo has no PREMUL_SUM: it sums the premultiplied inputs.
            if dtype != torch.bfloat16:
                with_gloo(f"all_reduce premul_sum {dtype} factor={f}",
                          lambda g: _all_reduce_copy((inputs[RANK].double() * f).to(dtype), g), t)

            out = torch.empty(numel, dtype=dtype)
            original = inputs[RANK].clone()
            dist.reduce_scatter_tensor(out, original, op=op)
            check(f"reduce_scatter_tensor premul_sum {dtype} factor={f}", out,
                  expected[RANK * numel:(RANK + 1) * numel])
            check(f"reduce_scatter_tensor premul_sum {dtype} leaves its input", original, inputs[RANK])

            t = inputs[RANK].clone()
            dist.reduce(t, 0, op=op)
            if RANK == 0:
                check(f"reduce premul_sum {dtype} factor={f}", t, expected)
            else:
                check(f"reduce premul_sum {dtype} leaves a non-root's input", t, inputs[RANK])

        out = torch.empty(numel, dtype=dtype)
        dist.reduce_scatter_tensor(out, inputs[RANK].clone(), op=dist.ReduceOp.AVG)
        check(f"reduce_scatter_tensor avg {dtype}", out, reduce_all(inputs, "avg")[RANK * numel:(RANK + 1) * numel])
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))
        failures.append("premul_sum on int32 did not raise")
    except RuntimeError as e:
        if "PREMUL_SUM" not in str(e):
            failures.append(f"premul_sum on int32 raised without naming the op: {e}")


def _all_reduce_copy(t, group):
    dist.all_reduce(t, group=group)
    return t


def test_coalesced():
    """all_gather_coalesced, the coalescing manager's fused calls, and batch_isend_irecv."""
    shapes = [(3, 4), (17,), (2, 2, 5)]
    inputs = [[data(r, int(torch.tensor(s).prod()), torch.float32, 20 + i).view(s) for i, s in enumerate(shapes)]
              for r in range(SIZE)]
    outs = [[torch.empty(s) for s in shapes] for _ in range(SIZE)]
    dist.all_gather_coalesced(outs, inputs[RANK])
    for r in range(SIZE):
        for i in range(len(shapes)):
            check(f"all_gather_coalesced rank {r} tensor {i}", outs[r][i], inputs[r][i])

    cpu = torch.device("cpu")
    mine = [t.clone() for t in inputs[RANK]]
    with dist._coalescing_manager(device=cpu, async_ops=True) as cm:
        for t in mine:
            dist.all_reduce(t)
    cm.wait()
    for i in range(len(shapes)):
        check(f"coalesced all_reduce tensor {i}", mine[i], reduce_all([inputs[r][i] for r in range(SIZE)], "sum"))

    gathered = [torch.empty(SIZE * t.numel()) for t in inputs[RANK]]
    with dist._coalescing_manager(device=cpu):
        for out, t in zip(gathered, inputs[RANK]):
            dist.all_gather_into_tensor(out, t)
    for i in range(len(shapes)):
        check(f"coalesced all_gather_into_tensor {i}", gathered[i],
              torch.cat([inputs[r][i].reshape(-1) for r in range(SIZE)]))

    for dtype in (torch.float32, torch.bfloat16):
        big = [[data(r, SIZE * 5 * (i + 1), dtype, 30 + i) for i in range(3)] for r in range(SIZE)]
        scattered = [torch.empty(5 * (i + 1), dtype=dtype) for i in range(3)]
        with dist._coalescing_manager(device=cpu):
            for out, t in zip(scattered, big[RANK]):
                dist.reduce_scatter_tensor(out, t, op=dist.ReduceOp.AVG)
        for i in range(3):
            n = 5 * (i + 1)
            check(f"coalesced reduce_scatter_tensor avg {dtype} {i}", scattered[i],
                  reduce_all([big[r][i] for r in range(SIZE)], "avg")[RANK * n:(RANK + 1) * n])

    send = data(RANK, 333, torch.float64, 40)
    got_left, got_right = torch.empty(333, dtype=torch.float64), torch.empty(333, dtype=torch.float64)
    ops = [dist.P2POp(dist.isend, send, (RANK + 1) % SIZE), dist.P2POp(dist.isend, send, (RANK - 1) % SIZE),
           dist.P2POp(dist.irecv, got_left, (RANK - 1) % SIZE), dist.P2POp(dist.irecv, got_right, (RANK + 1) % SIZE)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    check("batch_isend_irecv from the left", got_left, data((RANK - 1) % SIZE, 333, torch.float64, 40))
    check("batch_isend_irecv from the right", got_right, data((RANK + 1) % SIZE, 333, torch.float64, 40))


def test_sequence_numbers():
    """The group's sequence number counts collectives and agrees across ranks (torch's desync check)."""
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    before = backend._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(3))
    after = backend._get_sequence_number_for_group()
    if after != before + 1:
        failures.append(f"sequence number went from {before} to {after} over one all_reduce")
    numbers = [torch.zeros(1, dtype=torch.int64) for _ in range(SIZE)]
    dist.all_gather(numbers, torch.tensor([after], dtype=torch.int64), group=GLOO)
    check("sequence numbers agree", torch.cat(numbers), torch.full((SIZE,), after, dtype=torch.int64))


def test_barrier_and_futures():
    dist.barrier()
    t = torch.ones(8) * RANK
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    check("future then()", fut.wait(), torch.ones(8) * SIZE * (SIZE - 1))



def test_flight_record():
    """The flight record: every collective so far done, the same number on every rank (compared through gloo),
    the last one the barrier just made."""
    record = hiercoll_torch.flight_record()
    counts = [torch.zeros(2, dtype=torch.int64) for _ in range(SIZE)]
    dist.all_gather(counts, torch.tensor([record["called"], record["completed"]]), group=GLOO)
    check("flight record called/completed on every rank", torch.stack(counts),
          torch.tensor([[record["called"]] * 2] * SIZE))
    entries = record["entries"]
    ok = (record["rank"] == RANK and record["size"] == SIZE and record["called"] > 50
          and len(entries) == min(256, record["called"]) and entries[-1]["op"].startswith("barrier")
          and all(e["state"] == "done" and e["ended_us"] >= e["started_us"] >= e["queued_us"] > 0 for e in entries)
          and [e["seq"] for e in entries] == list(range(record["called"] - len(entries), record["called"])))
    if not ok:
        failures.append(f"flight record: {str(record)[:400]}")


if __name__ == "__main__":
    faulthandler.enable()
    dist.init_process_group(backend="hiercoll")
    GLOO = dist.new_group(backend="gloo")
    assert dist.get_backend() == "hiercoll", dist.get_backend()
    for n in [1, 7, 1000, 300_000]:
        test_all_reduce(n)
    test_all_reduce_coalesced()
    test_sparse_all_reduce()
    for n in [0, 5, 4097]:
        test_broadcast_and_reduce(n)
        test_all_gather(n)
        test_gather_scatter(n)
        test_reduce_scatter(n)
    for rows in [1, 4]:
        test_all_to_all(rows)
    test_send_recv()
    test_premul_sum_and_avg()
    test_coalesced()
    test_sequence_numbers()
    test_barrier_and_futures()
    dist.barrier()
    test_flight_record()
    print(f"rank {RANK}: {checked} checks, {len(failures)} failed", flush=True)
    if failures:
        print("\n".join(failures[:40]), file=sys.stderr)
        sys.exit(1)
    dist.destroy_process_group()
