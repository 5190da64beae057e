"""hiercoll as a torch.distributed backend.

    import hiercoll_torch  # registers the backend
    torch.distributed.init_process_group(backend="hiercoll")

Rendezvous goes through the store torch.distributed makes (env://, tcp://, file://), so torchrun and
mpirun launches work as they do for gloo. Knobs: HIERCOLL_* environment variables (docs/tuning.md).
"""
import atexit
import os

import torch
import torch.distributed as dist

from . import _C

__version__ = _C.__version__
BACKEND_NAME = "hiercoll"


def _create_backend(dist_options, backend_options=None):
    # The group's name keys its communicator: members of one group agree on it, whatever other groups
    # each process has made before (a process outside a subgroup makes none for it).
    return _C.create_backend(dist_options.store, dist_options.group_rank, dist_options.group_size,
                             dist_options.timeout, "pg-" + str(dist_options.group_id))


def _register():
    if getattr(dist.Backend, BACKEND_NAME.upper(), None) is not None and BACKEND_NAME.upper() in getattr(
        dist.Backend, "_plugins", {}
    ):
        return  # imported twice
    # CUDA tensors stay on the device where hiercoll was built with CUDA (docs/torch.md says which calls stage).
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])


def _backend_of(group):
    """The hiercoll object behind a process group (torch 2.x wraps backends in a ProcessGroup)."""
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    if hasattr(group, "_get_backend"):
        return group._get_backend(torch.device("cpu"))
    return group


def allreduce_algorithm(nbytes, group=None):
    """The algorithm hiercoll uses for an allreduce of `nbytes` in `group`: "ring", "rd" or "hier"."""
    return _C.allreduce_algorithm(_backend_of(group), nbytes)


def init_process_group(backend=BACKEND_NAME, **kwargs):
    """torch.distributed.init_process_group that also understands mpirun's environment.

    Under mpirun (Open MPI) RANK, WORLD_SIZE and LOCAL_RANK come from OMPI_COMM_WORLD_*; on one node
    MASTER_ADDR defaults to 127.0.0.1, across nodes pass it (mpirun -x MASTER_ADDR=host). MASTER_PORT
    defaults to 29500 as in torch. Under torchrun the environment is already complete.
    """
    mpi = {"RANK": "OMPI_COMM_WORLD_RANK", "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
           "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK"}
    for torch_name, mpi_name in mpi.items():
        if torch_name not in os.environ and mpi_name in os.environ:
            os.environ[torch_name] = os.environ[mpi_name]
    if "MASTER_ADDR" not in os.environ and os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") == os.environ.get(
        "OMPI_COMM_WORLD_SIZE", "-"
    ):
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group(backend=backend, **kwargs)


_register()
# Future callbacks run on hiercoll's completion threads and need the GIL; stop them before Python finalizes.
atexit.register(_C._quiesce)
