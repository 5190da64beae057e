"""hiercoll as a torch.distributed backend.

    import hiercoll_torch  # registers the backend
    torch.distributed.init_process_group(backend="hiercoll")

Rendezvous goes through the store torch.distributed makes (env://, tcp://, file://), so torchrun and
mpirun launches work as they do for gloo. Knobs: HIERCOLL_* environment variables (docs/tuning.md).
"""
import atexit
import datetime
import os

import torch
import torch.distributed as dist

# libfabric's psm provider loads libinfinipath, which would otherwise install its own handlers for SIGINT, SIGTERM,
# SIGSEGV and others as libfabric loads (at the first communicator: Python's KeyboardInterrupt lost, and a SIGTERM
# from torchrun or Slurm turned into exit() under running threads: lib/transport/fabric/foreign_handlers.cpp). Set
# here, before this process has threads of ours.
os.environ.setdefault("IPATH_NO_BACKTRACE", "1")
from . import _adapter  # noqa: E402

BACKEND_NAME = "hiercoll"
# The compiled adapter for the running torch (_adapter.py says where it is looked for). Where none fits, importing
# still works (python -m hiercoll_torch.build_adapter and .check run from here), and the first use raises the
# error that says which torch releases are served and how to build an adapter for this one: the registrar torch's
# entry point calls for init_process_group("hiercoll"), or any function below.
try:
    _C, ADAPTER = _adapter.load(torch.__version__, torch._C._GLIBCXX_USE_CXX11_ABI)
    __version__ = _C.__version__
except _adapter.AdapterError as _error:
    _C, ADAPTER, _adapter_error = None, None, _error
    __version__ = None


def _extension():
    if _C is None:
        raise _adapter.AdapterError(str(_adapter_error))
    return _C


def _create_backend(dist_options, backend_options=None):
    # The group's name keys its communicator: members of one group agree on it, whatever other groups
    # each process has made before (a process outside a subgroup makes none for it).
    # The members' global ranks name torch's flight-recorder dumps (older torch releases pass none).
    global_ranks = list(getattr(dist_options, "global_ranks_in_group", None) or [])
    # enable_reconfigure (torch >= 2.15): no communicator until ProcessGroup.reconfigure() names the members.
    deferred = bool(getattr(dist_options, "enable_reconfigure", False))
    return _extension().create_backend(dist_options.store, dist_options.group_rank, dist_options.group_size,
                                       dist_options.timeout, "pg-" + str(dist_options.group_id), global_ranks, deferred)


def _register():
    _extension()  # no adapter for this torch: the error that says what to do, before torch registers anything
    if getattr(dist.Backend, BACKEND_NAME.upper(), None) is not None and BACKEND_NAME.upper() in getattr(
        dist.Backend, "_plugins", {}
    ):
        return  # imported twice
    # CUDA tensors stay on the device where hiercoll was built with CUDA (docs/torch.md says which calls stage).
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])
    # hiercoll records into torch's flight recorder itself (bindings/torch/recorder.hpp): torch then attaches no hook
    # of its own to its groups, which cost more per call than the rest of the binding.
    self_recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if getattr(_C, "records_flight_natively", False) and self_recording is not None:
        self_recording.add(BACKEND_NAME)
    _fix_shrunk_groups()


def _fix_shrunk_groups():
    """torch 2.15's dist.shrink_group registers a shrunk group's CPU backend under the GLOO type whatever backend it
    is, and DDP's logger then takes hiercoll's for ProcessGroupGloo and crashes. A shrunk hiercoll group is registered
    as CUSTOM instead, as init_process_group registers it. Applied once, to torch releases that have shrink_group."""
    c10d = dist.distributed_c10d
    create = getattr(c10d, "_create_shrunk_process_group", None)
    if create is None or getattr(create, "_hiercoll_fixed", False):
        return

    def create_shrunk(new_backend, *args, **kwargs):
        group = create(new_backend, *args, **kwargs)
        if new_backend.name() == BACKEND_NAME:
            device = group.bound_device_id or torch.device("cpu")
            custom = c10d.ProcessGroup.BackendType.CUSTOM
            group._register_backend(torch.device(device.type), custom, new_backend)
            group._set_default_backend(custom)
        return group

    create_shrunk._hiercoll_fixed = True
    c10d._create_shrunk_process_group = create_shrunk


def _backend_of(group):
    """The hiercoll object behind a process group (torch 2.x wraps backends in a ProcessGroup)."""
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    if hasattr(group, "_get_backend"):
        return group._get_backend(torch.device("cpu"))
    return group


def allreduce_algorithm(nbytes, group=None):
    """The algorithm hiercoll uses for an allreduce of `nbytes` in `group`: "ring", "rd", "hier" or "sharded"."""
    return _extension().allreduce_algorithm(_backend_of(group), nbytes)


def flight_record(group=None):
    """This rank's last collectives in `group` (sequence number, operation, state, wall-clock times), as a dict.

    Write it from a watchdog or a signal handler when a job hangs; tools/flight-report merges the ranks' records
    and names the ranks behind (docs/reliability.md)."""
    import json

    return json.loads(_extension().flight_record(_backend_of(group)))


def init_process_group(backend=BACKEND_NAME, **kwargs):
    """torch.distributed.init_process_group that also understands mpirun's and Slurm's environment.

    Rank, world size and local rank come from torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else Open MPI's
    OMPI_COMM_WORLD_*, else Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. Without MASTER_ADDR, the job agrees
    on one through its launcher (PMIx under mpirun and srun --mpi=pmix: rank 0 publishes its reachable address and a
    free port, HIERCOLL_SOCKET_IFNAME picks the interface; Slurm without PMIx: the first node, port MASTER_PORT or
    20000 + job id % 20000); under mpirun without PMIx on one node it is 127.0.0.1. MASTER_PORT defaults to 29500.
    """
    # The environment is read in one place, hiercoll's lib/launch/environment.cpp; this only sets what it
    # says is missing, and never overrides a variable already set.
    timeout = kwargs.get("timeout") or datetime.timedelta(minutes=10)
    os.environ.update(_extension().torch_env_from_launcher(timeout))
    dist.init_process_group(backend=backend, **kwargs)


def _quiesce():
    """At exit: future callbacks run on hiercoll's completion threads and need the GIL, so they stop before Python
    finalizes; a flight-recorder dump under way (torch's abort hook, on a thread of its own) finishes first."""
    # torch's flight recorder waits TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC (15 s by default) for a dump with stack traces,
    # then tries again without them: the exit waits for both tries.
    try:
        wait_ms = int(os.environ.get("TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC") or 15000)
    except ValueError:
        wait_ms = 15000
    _C._quiesce(datetime.timedelta(milliseconds=2 * wait_ms + 5000))


if _C is not None:
    _register()
    atexit.register(_quiesce)
