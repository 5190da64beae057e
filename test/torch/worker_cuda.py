"""CUDA tensors through the hiercoll backend (run only where torch sees a GPU; ranks share the GPUs by
LOCAL_RANK modulo the device count). Collectives on CUDA tensors against a serial reference computed on the
CPU from every rank's regenerated inputs, work issued on a side stream, and DDP on a CUDA model whose averaged
gradients must equal the mean of every rank's gradients computed serially on the CPU."""
import os

import torch
import torch.distributed as dist

import hiercoll_torch  # noqa: F401  (registers the backend)

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", RANK)) % torch.cuda.device_count())
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.int64: 0}
failures = []


def data(rank, numel, dtype, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + 17 * numel + salt)
    if dtype.is_floating_point:
        return (torch.rand(numel, generator=g, dtype=torch.float64) * 2 + 0.5).to(dtype)
    return torch.randint(-20, 20, (numel,), generator=g, dtype=torch.int64).to(dtype)


def check(what, got, expected):
    got = got.cpu()
    tol = TOLERANCE[expected.dtype]
    if got.shape != expected.shape or not torch.allclose(got.double(), expected.double(), rtol=tol, atol=tol):
        failures.append(f"{what}: max difference {(got.double() - expected.double()).abs().max().item()}")


def collectives():
    for dtype in TOLERANCE:
        for numel in [1, 1000, 300001]:
            mine = data(RANK, numel, dtype)
            everyone = [data(r, numel, dtype) for r in range(SIZE)]
            total = torch.stack([t.double() for t in everyone]).sum(0).to(dtype)

            t = mine.to(DEVICE)
            dist.all_reduce(t)
            check(f"all_reduce {dtype} {numel}", t, total)

            t = mine.to(DEVICE) if RANK == 0 else torch.zeros(numel, dtype=dtype, device=DEVICE)
            dist.broadcast(t, src=0)
            check(f"broadcast {dtype} {numel}", t, everyone[0])

            out = torch.empty(numel * SIZE, dtype=dtype, device=DEVICE)
            dist.all_gather_into_tensor(out, mine.to(DEVICE))
            check(f"all_gather_into_tensor {dtype} {numel}", out, torch.cat(everyone))

            inputs = [data(r, numel * SIZE, dtype, salt=1) for r in range(SIZE)]
            out = torch.empty(numel, dtype=dtype, device=DEVICE)
            dist.reduce_scatter_tensor(out, inputs[RANK].to(DEVICE))
            summed = torch.stack([t.double() for t in inputs]).sum(0).to(dtype)
            check(f"reduce_scatter_tensor {dtype} {numel}", out, summed[RANK * numel:(RANK + 1) * numel])

            out = torch.empty(numel * SIZE, dtype=dtype, device=DEVICE)
            dist.all_to_all_single(out, inputs[RANK].to(DEVICE))
            expected = torch.cat([inputs[r][RANK * numel:(RANK + 1) * numel] for r in range(SIZE)])
            check(f"all_to_all_single {dtype} {numel}", out, expected)


def side_stream():
    # Issued on a side stream right after a kernel that writes the input there: the collective must wait for it.
    stream = torch.cuda.Stream(device=DEVICE)
    expected = sum(float(r + 1) for r in range(SIZE))
    with torch.cuda.stream(stream):
        t = torch.zeros(1 << 22, device=DEVICE)
        t.add_(RANK + 1)
        work = dist.all_reduce(t, async_op=True)
        work.wait()  # orders `stream`, does not block the host
        t.mul_(2)
    stream.synchronize()
    check("all_reduce on a side stream", t[:: 1 << 16], torch.full(((1 << 22) // (1 << 16),), 2 * expected))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def batch(rank):
    g = torch.Generator().manual_seed(77 + rank)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


def ddp():
    net = torch.nn.parallel.DistributedDataParallel(model().to(DEVICE), device_ids=[DEVICE.index],
                                                    bucket_cap_mb=0.01)
    x, y = batch(RANK)
    torch.nn.functional.mse_loss(net(x.to(DEVICE)), y.to(DEVICE)).backward()
    # Serial reference: every rank's gradients on the CPU, averaged.
    expected = None
    for r in range(SIZE):
        ref = model()
        xr, yr = batch(r)
        torch.nn.functional.mse_loss(ref(xr), yr).backward()
        grads = [p.grad.clone() for p in ref.parameters()]
        expected = grads if expected is None else [a + b for a, b in zip(expected, grads)]
    for i, (p, e) in enumerate(zip(net.module.parameters(), expected)):
        got, want = p.grad.cpu(), e / SIZE
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            failures.append(f"DDP gradient {i}: max difference {(got - want).abs().max().item()}")


dist.init_process_group("hiercoll", rank=RANK, world_size=SIZE)
torch.cuda.set_device(DEVICE)
# A phase that raises is a failure like any other, and the phases before it still report theirs.
for phase in (collectives, side_stream, ddp):
    try:
        phase()
    except Exception as e:  # noqa: BLE001 - reported below, and the run fails
        failures.append(f"{phase.__name__} raised {type(e).__name__}: {str(e)[:300]}")
        break
print(f"rank {RANK}: phases done, {len(failures)} failures so far", flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"rank {RANK}: {len(failures)} failed")
for f in failures[:20]:
    print("FAIL", f)
