"""What each rank of a test Slurm job runs (under mpilaunch): writes what it sees to
``$OUT/rank-<RANK>.json``, meets rank 0 at MASTER_ADDR:MASTER_PORT over TCP (the
rendezvous: mpilaunch started with --no-scheduler, rank 0 listens), then behaves as
``$MODE`` says: ``ok``; ``fail`` (rank 1 exits 3); ``hang`` (sleep; on SIGTERM save a
checkpoint file ``saved-<RANK>`` and exit 143)."""
import json
import os
import signal
import socket
import sys
import time

OUT = os.environ["OUT"]
RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
MODE = os.environ.get("MODE", "ok")
SHOWN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
         "MASTER_ADDR", "MASTER_PORT", "MS_ROLE", "RANK_ID", "DEVICE_ID", "SLURM_JOB_ID")


def rendezvous():
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if RANK == 0:
        srv = socket.create_server((addr, port), reuse_port=False)
        srv.settimeout(60)
        seen = []
        for _ in range(SIZE - 1):
            conn, _ = srv.accept()
            seen.append(int(conn.recv(16).decode()))
            conn.close()
        srv.close()
        return sorted(seen)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection((addr, port), timeout=5) as c:
                c.sendall(str(RANK).encode())
            return None
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main():
    seen = rendezvous()
    info = {k: os.environ.get(k) for k in SHOWN}
    info["host"] = socket.gethostname()
    info["peers"] = seen
    info["MA_"] = {k: v for k, v in os.environ.items() if k.startswith("MA_")}
    info["OMPI_MCA_pml"] = os.environ.get("OMPI_MCA_pml")
    with open(os.path.join(OUT, "rank-%d.json" % RANK), "w") as f:
        json.dump(info, f)
    if MODE == "fail" and RANK == 1:
        sys.exit(3)
    if MODE == "hang":
        def saved(signum, frame):
            with open(os.path.join(OUT, "saved-%d" % RANK), "w") as f:
                f.write(str(signum))
            sys.exit(128 + signum)
        signal.signal(signal.SIGTERM, saved)
        open(os.path.join(OUT, "started-%d" % RANK), "w").close()
        time.sleep(300)


if __name__ == "__main__":
    main()
