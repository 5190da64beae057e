"""python -m hiercoll_torch.check: whether hiercoll, as installed here, works here.

Prints the torch running and the one the backend was built for, the libfabric found (file, version, providers),
hwloc, PMIx and CUDA, then runs 2 ranks on this host that all_reduce the same tensors on hiercoll and on gloo and
compares every element. Exit status 0 only if all of it holds; each failed line says what to do.
"""
import datetime
import os
import subprocess
import sys

SIZES = [1, 255, 4096, 1 << 18]  # elements: one, odd, a page, 1 MB of float32


def _release(version):
    """'2.15.0+cu132' -> (2, 15): the binding is built per torch minor release."""
    return tuple(int(part) for part in version.split("+")[0].split(".")[:2])


def _rank_main(rank, world):
    """One rank of the 2-rank check: the same inputs through hiercoll and gloo, every element compared."""
    import torch
    import torch.distributed as dist

    import hiercoll_torch  # noqa: F401

    dist.init_process_group("hiercoll", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    worst = 0.0
    for count in SIZES:
        for dtype in (torch.float32, torch.int64):
            g = torch.Generator().manual_seed(1000 * count + rank)
            data = (torch.randn(count, generator=g) * 1000).to(dtype)
            ours, theirs = data.clone(), data.clone()
            dist.all_reduce(ours)
            dist.all_reduce(theirs, group=gloo)
            if not torch.equal(ours, theirs):
                worst = max(worst, (ours.double() - theirs.double()).abs().max().item())
    dist.destroy_process_group()
    print(f"rank {rank}: {'every element equal to gloo' if worst == 0 else f'differs from gloo by {worst}'}",
          flush=True)
    return 0 if worst == 0 else 1


def _two_ranks():
    """(ok, text): 2 processes of this module, meeting in a store this process serves."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    # As torchrun tells its ranks that it serves the store (torch <= 2.4 also reads the restart count then).
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
               TORCHELASTIC_RESTART_COUNT="0")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = [subprocess.Popen([sys.executable, "-m", "hiercoll_torch.check", "--rank", str(r), "2"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += "\n(killed after 180 s)"
        outputs.append(out.strip())
        codes.append(p.returncode)
    if codes == [0, 0]:
        return True, (f"2 ranks on this host, all_reduce of {len(SIZES)} sizes (float32, int64) equal to gloo's "
                      "element for element")
    return False, "2-rank all_reduce failed:\n" + "\n".join(
        f"  rank {r} (exit {c}):\n    " + o.replace("\n", "\n    ")[-3000:] for r, (c, o) in enumerate(zip(codes, outputs)))


def main():
    lines, ok = [], True

    def line(good, what, text):
        nonlocal ok
        ok = ok and good
        lines.append(f"[{'ok' if good else 'FAIL'}] {what}: {text}")

    try:
        import torch

        import hiercoll_torch
    except Exception as e:  # an import that fails is the finding
        print(f"[FAIL] import: {type(e).__name__}: {e}")
        return 1
    if hiercoll_torch._C is None:
        print(f"[FAIL] adapter: {hiercoll_torch._adapter_error}")
        return 1
    _C = hiercoll_torch._C
    built = _C.__torch_version__
    if _release(built) == _release(torch.__version__):
        line(True, "torch", f"{torch.__version__}; adapter {hiercoll_torch.ADAPTER}, built for {built}")
    else:
        line(False, "torch", f"{torch.__version__}, but the adapter found ({hiercoll_torch.ADAPTER}) was built for "
                             f"{built}: build one for this torch (python -m hiercoll_torch.build_adapter)")
    r = _C.runtime_report()
    if r["libfabric_loaded"]:
        line(True, "libfabric", f"{r['libfabric_path']}, version {r['libfabric_version']}, providers "
                                f"{', '.join(r['providers']) or 'none'}")
    else:
        line(False, "libfabric", r["libfabric_error"] + "\n  Without it jobs on one host still run (their messages go "
             "over Unix sockets, provider unix); jobs across hosts need it.")
    line(True, "hwloc", f"API {r['hwloc_version']}")
    line(True, "PMIx", f"{r['pmix_version']}: mpirun and srun --mpi=pmix jobs find their rendezvous" if r["pmix_version"]
         else "no libpmix.so.2 loads: mpirun and srun --mpi=pmix jobs need it (apt-get install libpmix2); "
         "torchrun and jobs that set MASTER_ADDR/MASTER_PORT do not")
    if r["cuda_tensors_in_place"]:
        line(True, "CUDA", "CUDA tensors go to hiercoll's device path in place (CUDA IPC inside a node)")
    else:
        gpu = " (this host has a GPU)" if torch.cuda.is_available() else ""
        if r["device_buffers"]:
            line(True, "CUDA", "this adapter was built without the CUDA runtime's headers: CUDA tensors are staged "
                               f"through host memory{gpu}; build_adapter where a CUDA Toolkit is (CUDA_HOME) puts "
                               "them in place")
        else:
            line(True, "CUDA", "the hiercoll library has no device path: CUDA tensors are staged through host memory"
                               + gpu)
    good, text = _two_ranks()
    line(good, "collectives", text)
    print("\n".join(lines))
    print("hiercoll works here" if ok else "hiercoll does not work here: see the FAIL lines")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank":
        sys.exit(_rank_main(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(main())
