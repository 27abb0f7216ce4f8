"""The README's demo job: one line per rank with what the rank adapter gave it.

    hello rank=1 size=2 local_rank=1 host=node-a MS_ROLE=MS_WORKER RANK_ID=1 DEVICE_ID=1 MASTER_ADDR=10.0.0.5

rank/size/local_rank come from the PyTorch variables (RANK, WORLD_SIZE, LOCAL_RANK), falling
back to the MindSpore/Ascend ones, then to Open MPI's; ``-`` when none is set.
The scheduler copy that the adapter also runs on rank 0 (MS_ROLE=MS_SCHED) prints nothing.
"""
import os
import socket
import sys


def first(*names):
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return "-"


def main():
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return 0
    rank = first("RANK", "RANK_ID", "MS_NODE_ID", "OMPI_COMM_WORLD_RANK")
    size = first("WORLD_SIZE", "RANK_SIZE", "MS_WORKER_NUM", "OMPI_COMM_WORLD_SIZE")
    local = first("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
    extra = " ".join(f"{k}={first(k)}" for k in ("MS_ROLE", "RANK_ID", "DEVICE_ID", "MASTER_ADDR"))
    print(f"hello rank={rank} size={size} local_rank={local} host={socket.gethostname()} {extra}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
