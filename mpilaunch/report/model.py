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
from mpilaunch.report.restarts import (FRESH, RESTART_PHASE_NAMES, RESTART_PHASES,  # noqa: F401 (drawn by html/png)
                                        SPARE_HOW, Restart)

WAITING, ADAPTER, RUNNING, TEARDOWN = "waiting", "adapter", "running", "teardown"
RESTARTING = "restarting"     # a row of an attempt restarted in place, until its new worker ran
PHASES = (WAITING, ADAPTER, RESTARTING, RUNNING, TEARDOWN)
PHASE_NAMES = {WAITING: "waiting for host", ADAPTER: "adapter start",
               RESTARTING: "restarting in place", RUNNING: "worker running", TEARDOWN: "teardown"}
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
        self.new_worker: Optional[str] = None   # restarted in place onto a spare, or fresh

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
        self.restart: Optional[Restart] = None      # the in-place restart that started it
        self.restarted: Optional[Restart] = None    # the in-place restart that ended it
        self.failed_in_place: Optional[int] = None  # the rank whose failure restarted it in place

    @property
    def in_place(self) -> bool:
        """Started by an in-place restart: inside the last attempt's starter, no start of its own."""
        return self.restart is not None and self.starter_start is None

    @property
    def end(self) -> Optional[float]:
        times = [t for t in (self.teardown_end, self.starter_exit) if t is not None]
        if self.restarted is not None and self.restarted.failed is not None:
            times.append(self.restarted.failed)
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
        # an in-place restart's lines come under the attempt the record is at; a rank told of
        # a restart is in the next attempt from then on (rank -> that attempt)
        self.told: Dict[int, int] = {}

    def restart(self, index: int) -> Restart:
        """The in-place restart into attempt ``index``."""
        att = self.attempt(index)
        if att.restart is None:
            att.restart = Restart(index)
            self.attempt(index - 1).restarted = att.restart
        return att.restart

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


# an in-place restart's steps per rank (rank_status events), and the new worker's own records
RESTART_STEPS = ("restart", "stopped") + tuple(SPARE_HOW)
RANK_KINDS = ("process_start", "first_output", "process_exit")


def _attempt_of(job: Job, rec: Dict[str, Any]) -> int:
    """The attempt a record is of: a rank told of an in-place restart is in the next attempt,
    whatever attempt the record was at when its line came."""
    index, rank = rec.get("attempt") or 0, rec.get("rank")
    if not isinstance(rank, int):
        return index
    step = rec["kind"] == "rank_status" and rec.get("event") in RESTART_STEPS
    if step and rec.get("event") == "restart":
        code = rec.get("code")
        told = job.told.get(rank, index)
        job.told[rank] = code if isinstance(code, int) and code > told else max(told, index) + 1
    if step or rec["kind"] in RANK_KINDS:
        return max(index, job.told.get(rank, 0))
    return index


def _restarts(job: Job, att: Attempt, rec: Dict[str, Any]) -> bool:
    """What ``rec`` says of an in-place restart into ``att``; True when that is all it says."""
    kind, t, rank, event = rec["kind"], rec.get("t"), rec.get("rank"), rec.get("event")
    if kind == "rank_status" and event in RESTART_STEPS and isinstance(rank, int):
        r = job.restart(att.index)
        if event in SPARE_HOW:
            r.how[rank] = SPARE_HOW[event]
        elif t is not None:
            r.marks[str(event)].setdefault(rank, t)
        return True
    if kind == "restart_phases":
        r = job.restart(att.index)
        r.total, r.phases, r.spare = rec.get("total"), rec.get("phases") or {}, rec.get("spare") or {}
        return True
    if kind == "restart" and rec.get("mode") == "in-place" and rec.get("next_attempt"):
        job.restart(int(rec["next_attempt"])).cause = rec.get("cause")
        return True
    if kind == "rank_status" and event == "restart-in-place" and isinstance(rank, int):
        att.failed_in_place = rank      # its root cause: no attempt_end names it in place
    mark = {"process_start": "started", "first_output": "output"}.get(kind)
    into = att.restart
    if mark and into is not None and t is not None and rank in into.marks["restart"]:
        into.marks[mark].setdefault(rank, t)   # the new worker's, and its row's below
    return False


def _apply(job: Job, rec: Dict[str, Any]) -> None:
    kind, t, att = rec["kind"], rec.get("t"), job.attempt(_attempt_of(job, rec))
    if _restarts(job, att, rec):
        return
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
    if att.in_place:    # the same adapters: from the failure until its new worker ran
        marks = [(RESTARTING, begin), (RUNNING, row.started)]
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
        if att.in_place and att.start is None and att.restart is not None:
            att.start = att.restart.failed      # an in-place attempt has no attempt_start
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
            if att.in_place and att.restart is not None and row.role == "worker":
                row.new_worker = att.restart.how.get(row.rank, FRESH) if row.rank is not None else None
            row.root = (root is not None and root.rank == row.rank and row.rank is not None
                        and (root.role or "worker") in (row.role, "adapter"))
        failed = att.rows.get((att.failed_in_place, "worker"))
        if root is None and att.restarted is not None and failed is not None:
            failed.root = True      # the marker at the failure, where the attempt's rows end
    return job
