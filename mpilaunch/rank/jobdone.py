"""MindSpore jobs end when their workers end.

MindSpore's scheduler leaves on its own only at its next "alive nodes" poll, up to 5 s after
the last worker unregistered (docs/OPENMPI_FACTS.md section 12). The adapters know better:

* every rank's adapter whose worker exited 0 sends ``mpilaunch-done <job> <rank>`` as a UDP
  datagram to rank 0's host at the scheduler's port number (``MS_SCHED_HOST``/``MS_SCHED_PORT``
  of its worker: the address every rank already routes to; UDP, so the scheduler's TCP port
  is not disturbed), three copies at once;
* rank 0's adapter, when it runs the scheduler, listens there (bound before any child starts);
  once its own worker exited 0 and every other rank said so, it stops the scheduler
  (SIGTERM, SIGKILL after the grace) and the rank ends with status 0, quietly.

Why this and not the alternatives: the scheduler's log text is MindSpore's to change (and a
worker that exits 0 is the fact we need, not a line saying it unregistered); the adapters do
not call MPI_Init (it would cost every rank ~0.35 s), so no MPI channel; the launcher sees the ranks' output
but reaches rank 0's processes only through mpirun. A lost datagram or a port someone else
holds costs nothing but the speed-up: the scheduler still leaves on its own, as before
(``--scheduler-grace`` bounds it). ``<job>`` is the job's id from the starter (PMIx namespace,
Open MPI job id, Slurm JOBID.STEPID; Hydra gives none: no speed-up there): a message of another
job or a stray datagram is ignored; a rank is counted once and only below the job's size.
"""
from __future__ import annotations

import threading

TYPE_CHECKING = False   # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    import socket
    from typing import Any, Callable, Dict, Mapping, Optional, Set, Tuple

    Put = Callable[[Tuple[str, int]], None]

PREFIX = b"mpilaunch-done "
COPIES = 3
_JOB_VARS = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid",
             "SLURM_JOB_ID")


def job_id(env: Mapping[str, str]) -> Optional[str]:
    """What every rank of this job has in common (no spaces), or None when the starter gives
    nothing of the kind (Hydra's ranks: then no message is sent or heard)."""
    parts = [env.get(name, "") for name in _JOB_VARS]
    if env.get("SLURM_JOB_ID"):
        parts.append(env.get("SLURM_STEP_ID", ""))
    text = "|".join(parts).replace(" ", "_")
    return text if text.strip("|") else None


def _where(env: Mapping[str, str]) -> Optional[Tuple[str, int, int]]:
    """(scheduler host, port, number of workers) from a worker's env, or None."""
    try:
        return env["MS_SCHED_HOST"], int(env["MS_SCHED_PORT"]), int(env["MS_WORKER_NUM"])
    except (KeyError, ValueError):
        return None


def message(job: str, rank: int) -> bytes:
    return PREFIX + f"{job} {rank}".encode("utf-8", "replace")


def parse(data: bytes, job: str, size: int) -> Optional[int]:
    """The rank a datagram reports, or None (another job, garbage, out of range)."""
    if not data.startswith(PREFIX):
        return None
    try:
        their_job, said = data[len(PREFIX):].decode("utf-8").rsplit(" ", 1)
        rank = int(said)
    except ValueError:
        return None
    return rank if their_job == job and 0 < rank < size else None


def send_done(worker_env: Mapping[str, str], rank: int) -> None:
    """A worker of rank ``rank`` > 0 exited 0: tell rank 0's adapter. Never raises."""
    where, job = _where(worker_env), job_id(worker_env)
    if where is None or job is None or rank == 0:
        return
    host, port, _ = where
    data = message(job, rank)
    import socket   # here, not at the top: the ranks of a job without a scheduler never send
    try:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for _ in range(COPIES):
                s.sendto(data, (host, port))
        finally:
            s.close()
    except OSError:
        pass


class Listener:
    """Rank 0 with a scheduler: counts the other ranks' finished workers. ``put(event)`` is
    called with ``("peer-done", rank)`` from a daemon thread."""

    def __init__(self, worker_env: Mapping[str, str], put: Put) -> None:
        self.ranks: Set[int] = set()
        self.sock: Optional[socket.socket] = None
        where, job = _where(worker_env), job_id(worker_env)
        self.job = job
        if where is None or job is None:
            return
        host, port, self.size = where
        import socket

        try:   # an IPv6 scheduler address (IPv6-only hosts): the IPv6 wildcard
            v6 = ":" in host
            s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("::" if v6 else "0.0.0.0", port))
        except OSError:
            return   # the port's UDP side is taken: no speed-up, the scheduler leaves by itself
        self.sock = s
        threading.Thread(target=self._receive, args=(s, put, job), name="jobdone", daemon=True).start()

    def _receive(self, sock: socket.socket, put: Put, job: str) -> None:
        while True:
            try:
                data = sock.recv(512)
            except OSError:
                return
            rank = parse(data, job, self.size)
            if rank is not None and rank not in self.ranks:
                self.ranks.add(rank)
                put(("peer-done", rank))

    def complete(self) -> bool:
        """Every other rank's worker exited 0 (rank 0's own is the caller's to know)."""
        return self.sock is not None and len(self.ranks) >= self.size - 1


def listener_for(rank: int, children: Dict[str, Any], put: Put) -> Optional[Listener]:
    """A :class:`Listener` for rank 0 running a scheduler, else None."""
    if rank != 0 or "scheduler" not in children or "worker" not in children:
        return None
    return Listener(children["worker"].spec.env, put)


def stop_scheduler_if_all_done(sup: Any) -> bool:
    """Rank 0's supervisor (``mpilaunch.rank.supervisor.Supervisor``): once its own worker and
    every other rank's exited 0, SIGTERM the scheduler (the subtree's SIGKILL follows after the
    grace, on the way out) and say so: the rank ends with status 0 and no status line."""
    worker, sched = sup.children.get("worker"), sup.children.get("scheduler")
    done = getattr(sup, "jobdone", None)
    if not (done and done.complete() and worker.reported and worker.status == 0):
        return False
    with sup.lock:
        sup.stopping = True
    if sched.proc is not None and sched.status is None:
        try:
            sched.proc.terminate()
        except OSError:
            pass
        sup.wait_for_children([sched], sup.kill_grace)
    sched.reported = True
    return True
