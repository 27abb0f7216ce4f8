"""LOG_DIR/events.jsonl read back as a job: attempts, one row per rank process, the phases
each row went through (docs/EVENTS.md). Pure: records in, a model out; the HTML, the PNG and
the Python API's result are all drawn from it, so they tell the same story."""
from __future__ import annotations

import json
import os
import statistics
from collections import namedtuple
from typing import Any, Dict, Iterable, List, Optional, Tuple

from mpilaunch.errors import UsageError
from mpilaunch.output.outcome import PROCESS, Failure

WAITING, ADAPTER, RUNNING, TEARDOWN = "waiting", "adapter", "running", "teardown"
PHASES = (WAITING, ADAPTER, RUNNING, TEARDOWN)
PHASE_NAMES = {WAITING: "waiting for host", ADAPTER: "adapter start", RUNNING: "worker running",
               TEARDOWN: "teardown"}
NOT_SEEN = "(never reported)"

Phase = namedtuple("Phase", "name start end")
Rec = Dict[str, Any]    # one record of the events file, as read back


class Row:
    """One process of a rank (its worker, or rank 0's scheduler): what the record says of it."""

    def __init__(self, rank: Optional[int], role: str, host: str) -> None:
        self.rank, self.role, self.host = rank, role, host
        # times (s since the epoch): the launcher's clock, but *_host_t: the rank's host's
        self.up: Optional[float] = None
        self.up_host_t: Optional[float] = None
        self.started: Optional[float] = None
        self.output: Optional[float] = None
        self.exit: Optional[float] = None
        self.exit_host_t: Optional[float] = None
        self.adapter_pid: Optional[int] = None
        self.pid: Optional[int] = None
        # how it ended, as its process_exit record says (docs/EVENTS.md)
        self.status: Optional[int] = None
        self.signal: Optional[int] = None
        self.cause: Optional[str] = None
        self.by: Optional[str] = None
        self.log: Optional[str] = None
        self.message: Optional[str] = None
        self.exception: Optional[Rec] = None   # what it died of, as its rank found it (rank/exception.py)
        self.tail: List[str] = []
        self.phases: List[Phase] = []
        self.root = False
        self.suspect = False    # the odd rank out of a stacks verdict

    @property
    def skew(self) -> Optional[float]:
        """The host's clock minus the launcher's at "adapter up" (the relay's delay included)."""
        if self.up_host_t is None or self.up is None:
            return None
        return self.up_host_t - self.up


class Attempt:
    def __init__(self, index: int) -> None:
        self.index = index
        self.start: Optional[float] = None
        self.starter_start: Optional[float] = None
        self.starter_exit: Optional[float] = None
        self.teardown_start: Optional[float] = None
        self.teardown_end: Optional[float] = None
        self.teardown_reason: Optional[str] = None
        self.program: str = "mpirun"
        self.starter_pid: Optional[int] = None
        self.returncode: Optional[int] = None
        self.status: Optional[int] = None
        self.cause: Optional[str] = None
        # the root cause's process, as attempt_end names it: the launcher's Failure read back
        self.root: Optional[Failure] = None
        self.stopped_by: Optional[int] = None
        self.lost_hosts: List[str] = []
        self.log_dir: Optional[str] = None
        self.np = 0
        self.rows: Dict[Tuple[Optional[int], str], Row] = {}    # (rank, role) -> Row
        self.summary: Optional[str] = None
        self.notes: List[Rec] = []      # the watchdog's and graceful stops' status lines
        self.stacks: List[Rec] = []     # mpilaunch stacks / the stall's dumps: their verdicts (docs/HANGS.md)
        # (t, every rank's wait share): the monitor's rounds (docs/MONITOR.md)
        self.waits: List[Tuple[Optional[float], List[Any]]] = []
        self.stragglers: List[Rec] = []     # straggler records: named, recovered

    @property
    def end(self) -> Optional[float]:
        times = [t for t in (self.teardown_end, self.starter_exit) if t is not None]
        times += [r.exit for r in self.rows.values() if r.exit is not None]
        return max(times) if times else self.start

    def ranks(self) -> List[Row]:
        """The rank rows (workers), by rank."""
        return sorted((r for r in self.rows.values() if r.role != "scheduler"),
                      key=lambda r: (r.rank is None, r.rank))

    def by_host(self) -> List[Tuple[str, List[Row]]]:
        """[(host, rows)] in the order of each host's lowest rank; a scheduler row right after
        its rank's worker."""
        hosts: "dict[str, list[Row]]" = {}
        for row in sorted(self.rows.values(), key=lambda r: (r.rank is None, r.rank or 0,
                                                              r.role == "scheduler")):
            hosts.setdefault(row.host, []).append(row)
        return list(hosts.items())

    def slowest(self) -> Optional[Dict[str, Any]]:
        """(row, seconds) of the rank whose worker started last after the starter, the median
        of all, and (host, seconds) of the host whose last rank started last."""
        ref = self.starter_start if self.starter_start is not None else self.start
        if ref is None:     # no attempt_start record: nothing to measure from
            return None
        started = [(r, r.started - ref) for r in self.ranks() if r.started is not None]
        if not started:
            return None
        row, worst = max(started, key=lambda x: x[1])
        per_host: "dict[str, float]" = {}
        for r, s in started:
            per_host[r.host] = max(per_host.get(r.host, s), s)
        host = max(per_host.items(), key=lambda x: x[1])
        return {"row": row, "seconds": worst, "median": statistics.median(s for _, s in started),
                "host": host[0], "host_seconds": host[1], "hosts": len(per_host)}


class Job:
    def __init__(self, path: str) -> None:
        self.path = path
        self.start: Optional[float] = None
        self.meta: Rec = {}             # the launcher_start record
        self.hosts: Rec = {}            # the hosts record
        self.preflight: List[Rec] = []  # preflight_host records
        self.preflight_span: Optional[List[Optional[float]]] = None
        self.attempts: List[Attempt] = []
        self.status: Optional[int] = None
        self.error: Optional[str] = None
        self.finished = False
        self.schema: Optional[int] = None

    def attempt(self, index: int) -> Attempt:
        while len(self.attempts) <= index:
            self.attempts.append(Attempt(len(self.attempts)))
        return self.attempts[index]

    @property
    def last(self) -> Optional[Attempt]:
        return self.attempts[-1] if self.attempts else None


def read(path: str) -> List[Dict[str, Any]]:
    """The records of an events file, in the order written (a torn last line is skipped)."""
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and "kind" in rec:
                    records.append(rec)
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}; give the LOG_DIR of a job mpilaunch ran "
                         "(it writes LOG_DIR/events.jsonl)") from None
    return sorted(records, key=lambda r: (r.get("seq", 0)))


def load(log_dir_or_file: str) -> Job:
    path = log_dir_or_file
    if os.path.isdir(path):
        path = os.path.join(path, "events.jsonl")
    return build(read(path), path)


def _row(att: Attempt, rec: Dict[str, Any], role: Optional[str] = None) -> Row:
    role = role or rec.get("role") or "worker"
    if role == "adapter":
        role = "worker"
    key = (rec.get("rank"), role)
    row = att.rows.get(key)
    if row is None:
        row = att.rows[key] = Row(rec.get("rank"), role, rec.get("host") or NOT_SEEN)
    if rec.get("host") and row.host == NOT_SEEN:
        row.host = rec["host"]
    return row


def _apply(job: Job, rec: Dict[str, Any]) -> None:
    kind, t = rec["kind"], rec.get("t")
    att = job.attempt(rec.get("attempt") or 0)
    if kind == "launcher_start":
        job.start, job.meta, job.schema = t, rec, rec.get("v")
    elif kind == "hosts":
        job.hosts = rec
    elif kind == "preflight_start":
        job.preflight_span = [t, None]
    elif kind == "preflight_host":
        job.preflight.append(rec)
    elif kind == "preflight_end" and job.preflight_span:
        job.preflight_span[1] = t
    elif kind == "attempt_start":
        att.start, att.log_dir, att.np = t, rec.get("log_dir"), rec.get("np") or 0
    elif kind == "starter_start":
        att.starter_start, att.program, att.starter_pid = t, rec.get("program") or "mpirun", rec.get("pid")
    elif kind == "starter_exit":
        att.starter_exit, att.returncode = t, rec.get("returncode")
    elif kind == "teardown_start":
        att.teardown_start, att.teardown_reason = t, rec.get("reason")
    elif kind == "teardown_end":
        att.teardown_end = t
    elif kind == "adapter_up":
        row = _row(att, rec, "worker")
        row.up, row.up_host_t, row.adapter_pid = t, rec.get("host_t"), rec.get("pid")
    elif kind == "process_start":
        row = _row(att, rec)
        row.started, row.pid = t, rec.get("pid")
    elif kind == "first_output":
        row = _row(att, rec)
        row.output = row.output or t
    elif kind == "process_exit":
        row = _row(att, rec)
        if row.exit is None or row.cause == "ok":
            row.exit, row.exit_host_t = t, rec.get("host_t")
            for k in ("status", "signal", "cause", "by", "log", "message", "exception"):
                setattr(row, k, rec.get(k))
            row.tail = rec.get("tail") or []
    elif kind == "rank_status":
        att.notes.append(rec)
    elif kind == "stacks":
        att.stacks.append(rec)
        for rank in rec.get("odd") or []:
            _row(att, {"rank": rank, "role": "worker"}).suspect = True
    elif kind == "wait_share":
        att.waits.append((t, rec.get("shares") or []))
    elif kind == "straggler":
        att.stragglers.append(rec)
    elif kind == "attempt_end":
        root = rec.get("root")
        att.status, att.cause = rec.get("status"), rec.get("cause")
        att.root = (Failure.from_json({**root, "kind": PROCESS, "cause": att.cause})
                    if isinstance(root, dict) else None)
        att.stopped_by, att.lost_hosts = rec.get("stopped_by"), rec.get("lost_hosts") or []
    elif kind == "summary":
        att.summary = rec.get("text")
    elif kind == "job_end":
        job.status, job.error, job.finished = rec.get("status"), rec.get("error"), True


def _phases(att: Attempt, row: Row) -> List[Phase]:
    begin = att.starter_start if att.starter_start is not None else att.start
    end = row.exit if row.exit is not None else (att.starter_exit or att.end)
    cut = att.teardown_start
    marks = [(WAITING, begin), (ADAPTER, row.up), (RUNNING, row.started)]
    marks = [(name, t) for name, t in marks if t is not None]
    out: List[Phase] = []
    for i, (name, t) in enumerate(marks):
        stop = marks[i + 1][1] if i + 1 < len(marks) else end
        if stop is None or t is None:
            continue
        if cut is not None and cut < stop:   # the part after the teardown started
            if t < cut:
                out.append(Phase(name, t, cut))
            out.append(Phase(TEARDOWN, max(t, cut), stop))
            break
        out.append(Phase(name, t, max(t, stop)))
    merged: "list[Phase]" = []
    for ph in out:
        if merged and merged[-1].name == ph.name:
            merged[-1] = Phase(ph.name, merged[-1].start, ph.end)
        elif ph.end > ph.start or ph.name != TEARDOWN:
            merged.append(ph)
    return merged


def build(records: Iterable[Dict[str, Any]], path: str = "events.jsonl") -> Job:
    job = Job(path)
    for rec in records:
        _apply(job, rec)
    for att in job.attempts:
        np = att.np or (job.hosts.get("np") if job.hosts else 0) or 0
        for planned in range(np):         # every planned rank has a row, reported or not
            if (planned, "worker") not in att.rows:
                att.rows[(planned, "worker")] = Row(planned, "worker", NOT_SEEN)
        root = att.root
        for (rank, role), row in att.rows.items():
            worker = att.rows.get((rank, "worker"))
            if role == "scheduler" and worker is not None and row.up is None:
                row.up, row.up_host_t = worker.up, worker.up_host_t   # one adapter starts both
        for row in att.rows.values():
            row.phases = _phases(att, row)
            row.root = (root is not None and root.rank == row.rank and row.rank is not None
                        and (root.role or "worker") in (row.role, "adapter"))
    return job
