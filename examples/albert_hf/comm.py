"""The process group for --backend, and the DDP communication hook that averages gradients and times the wait.

Backends: hiercoll (this project), gloo, nccl (CUDA), and mpi: torch's own MPI backend where the torch build has one
(PyPI's wheels do not), else Open MPI's MPI_Allreduce through mpi4py from the hook, on one background thread so it
overlaps backward as a DDP backend does, with a gloo group for the rest (DDP's start-up broadcast, the logs).
Ranks come from torchrun's variables, or from mpirun's / Slurm's (hiercoll_torch.init_process_group reads them and
agrees on a rendezvous address through PMIx).
"""
import concurrent.futures
import datetime
import os
import time

import torch
import torch.distributed as dist

BACKENDS = ("hiercoll", "gloo", "nccl", "mpi")


def init_process_group(backend, timeout_s=600):
    """Joins the job's process group; returns the gradient-averaging hook for DDP (an Averager)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}' (one of {', '.join(BACKENDS)})")
    use_mpi4py = backend == "mpi" and not dist.is_mpi_available()
    if use_mpi4py and "OMPI_COMM_WORLD_SIZE" not in os.environ and "PMI_SIZE" not in os.environ:
        raise RuntimeError("--backend mpi averages gradients with MPI_Allreduce: start the ranks with mpirun")
    try:
        import hiercoll_torch  # registers "hiercoll"; its init also understands mpirun's and Slurm's variables
        init = hiercoll_torch.init_process_group
    except ImportError:
        if backend == "hiercoll":
            raise RuntimeError("--backend hiercoll needs hiercoll_torch on PYTHONPATH (build/python after "
                               "scripts/dev/build, or pip install .)") from None
        init = dist.init_process_group
    init(backend="gloo" if use_mpi4py else backend, timeout=datetime.timedelta(seconds=timeout_s))
    if use_mpi4py:
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() != dist.get_rank():
            raise RuntimeError(f"MPI rank {MPI.COMM_WORLD.Get_rank()} is torch rank {dist.get_rank()}: "
                               "start every rank with the same launcher")
        return Averager(mpi_comm=MPI.COMM_WORLD)
    return Averager()


def new_group(backend, timeout_s=600):
    """A second group of every rank on another backend, and its Averager (train.py --interleave)."""
    if backend not in ("hiercoll", "gloo", "nccl"):
        raise ValueError(f"cannot interleave backend '{backend}' (hiercoll, gloo or nccl)")
    if backend == "hiercoll":
        import hiercoll_torch  # noqa: F401  (registers "hiercoll")
    return Averager(group=dist.new_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s)))


def local_rank():
    for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def averaging_hook(averager, bucket):
    """The DDP communication hook (DDP wants a function; its state is the Averager)."""
    return averager.allreduce(bucket)


class Averager:
    """State of the DDP communication hook: each bucket divided by the world size and summed over the ranks (what
    DDP's default hook does), with the moment the last bucket was handed over noted, so the trainer can tell how
    long backward then waited for communication to finish (`exposed_wait`)."""

    def __init__(self, mpi_comm=None, group=None):
        self.mpi_comm = mpi_comm
        self.group = group  # None: the default group
        self.calls = 0  # buckets averaged
        self.last_handover = None
        self.last_handover_wall = None  # time.time(): comparable across the ranks of one host (--timeline-out)
        # One thread makes every MPI call (MPI_THREAD_SERIALIZED is enough) in bucket order.
        self.mpi_thread = concurrent.futures.ThreadPoolExecutor(1) if mpi_comm is not None else None

    @property
    def name(self):
        return "mpi (Open MPI MPI_Allreduce via mpi4py)" if self.mpi_comm is not None else dist.get_backend(self.group)

    def allreduce(self, bucket):
        tensor = bucket.buffer().div_(dist.get_world_size())
        self.calls += 1
        self.last_handover = time.perf_counter()
        self.last_handover_wall = time.time()
        if self.mpi_comm is None:
            work = dist.all_reduce(tensor, group=self.group, async_op=True)
            return work.get_future().then(lambda fut: fut.value()[0])
        if tensor.device.type != "cpu":
            raise RuntimeError("--backend mpi averages host tensors only; use --device cpu")
        future = torch.futures.Future()

        def allreduce():
            try:
                from mpi4py import MPI

                self.mpi_comm.Allreduce(MPI.IN_PLACE, tensor.numpy())
                future.set_result(tensor)
            except Exception as error:  # the training thread raises it from backward
                future.set_exception(error)

        self.mpi_thread.submit(allreduce)
        return future

    def exposed_wait(self, backward_end):
        """Seconds backward ran past the hand-over of its last bucket: communication not hidden behind compute."""
        return 0.0 if self.last_handover is None else max(0.0, backward_end - self.last_handover)
