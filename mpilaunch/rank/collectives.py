"""Which frames of a Python stack are a collective's: what torch.distributed, MindSpore and
mpi4py look like while a rank waits for the others. Pure: frames in, names out.

Two readers: the launcher's ``mpilaunch stacks`` verdict (mpilaunch/stacks/verdict.py: one
py-spy dump per rank) and the rank's own monitor (rank/monitor.py: the share of its stack
samples that wait in one). Loaded by the rank side only in the monitor's thread, after the
worker has started (``re``: the rank-side import budget, tests/rank/test_options.py).
"""
from __future__ import annotations

import os
import re
from collections import namedtuple

# the one rule for a library frame (rank/pyspy.py), used here and by this module's readers
from mpilaunch.rank.pyspy import is_library  # noqa: F401

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence

# torch.distributed's collectives and point-to-point calls (torch/distributed/distributed_c10d.py)
TORCH = frozenset((
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_coalesced",
    "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single", "barrier",
    "monitored_barrier", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list", "send",
    "recv", "send_object_list", "recv_object_list", "batch_isend_irecv", "new_group",
    "init_process_group", "destroy_process_group"))
TORCH_FILES = ("torch/distributed/distributed_c10d.py",)
# MindSpore: every call of mindspore.communication (init's rendezvous, comm_func's collectives),
# and from 2.9 on the collectives' own files: mindspore.ops.communication's (its functions live
# in ops/function/comm_func.py) and mint.distributed's. In PyNative mode a collective returns
# before it has run, unless MS_DEV_LAUNCH_BLOCKING=1 (docs/MONITOR.md, "MindSpore")
MINDSPORE_DIR = "mindspore/communication/"
MINDSPORE_FILES = ("mindspore/ops/function/comm_func.py", "mindspore/mint/distributed/distributed.py")
# mpi4py's calls run in C (no Python frame): the user's line that makes one, or with
# --native the MPI library's own frame
MPI_CALLS = ("allreduce", "Allreduce", "bcast", "Bcast", "barrier", "Barrier", "gather",
             "Gather", "allgather", "Allgather", "scatter", "Scatter", "reduce", "Reduce",
             "alltoall", "Alltoall", "sendrecv", "Sendrecv", "recv", "Recv", "send", "Send",
             "wait", "Wait", "Waitall", "waitall", "Iallreduce", "Ibarrier", "Reduce_scatter")
MPI_LINE = re.compile(r"\.(" + "|".join(MPI_CALLS) + r")\(")
MPI_NATIVE = re.compile(r"^P?MPI_[A-Z][a-z_]+")

Frame = namedtuple("Frame", "func path line source")


def short(path: str) -> str:
    """How a frame's file is shown: a package's path from the package, a user's file by name."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return os.path.basename(path)


def collective(frame: Frame) -> Optional[str]:
    """``all_reduce (torch.distributed)`` when ``frame`` is a torch or MindSpore collective's,
    or (``--native``) mpi4py's own method of an MPI call, else None."""
    if frame.func in TORCH and frame.path.endswith(TORCH_FILES):
        return f"{frame.func} (torch.distributed)"
    if MINDSPORE_DIR in frame.path or frame.path.endswith(MINDSPORE_FILES):
        return f"{frame.func} (mindspore.communication)"
    if "/mpi4py/" in frame.path and frame.func in MPI_CALLS:
        return f"{frame.func} (mpi4py)"
    return None


def collective_of(frames: Sequence[Frame]) -> Optional[str]:
    """The collective a thread waits in: any of its frames' (:func:`collective`), else the MPI
    library's own frame (``--native``: ``PMPI_Allreduce``), else the MPI call its innermost
    Python frame's line makes (only that frame's line runs; an outer frame's line may be
    evaluating an argument, ``comm.allreduce(read_shard())``)."""
    for f in frames:
        name = collective(f)
        if name:
            return name
    for f in frames:
        m = MPI_NATIVE.match(f.func)
        if m:
            return f"{m.group(0)} (mpi4py)"
    innermost = next((f for f in frames if f.line), None)
    call = mpi4py_call(innermost) if innermost is not None else None
    return f"{call} (mpi4py)" if call else None


def mpi4py_call(frame: Frame) -> Optional[str]:
    """The MPI call a user's line makes (``comm.allreduce(x)`` -> ``allreduce``), or None."""
    if not frame.source or is_library(frame.path):
        return None
    m = MPI_LINE.search(frame.source)
    return m.group(1) if m else None


def at(frames: Sequence[Frame]) -> str:
    """Where a thread that is not in a collective is (frames innermost first): its innermost
    frame of the user's own code, ``train.py:41 in load_batch``, else its innermost frame."""
    mine = next((f for f in frames if not is_library(f.path)), frames[0])
    return f"{short(mine.path)}:{mine.line} in {mine.func}" if mine.line else f"{mine.func} ({mine.path})"
