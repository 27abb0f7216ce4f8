"""LOG_DIR/events.jsonl read back as a job: attempts, one row per rank process, the phases
each row went through (docs/EVENTS.md). Pure: records in, a model out; the HTML, the PNG and
the Python API's result are all drawn from it, so they tell the same story."""
from __future__ import annotations

import json
import os
import statistics
from collections import namedtuple

from mpilaunch.errors import UsageError

WAITING, ADAPTER, RUNNING, TEARDOWN = "waiting", "adapter", "running", "teardown"
PHASES = (WAITING, ADAPTER, RUNNING, TEARDOWN)
PHASE_NAMES = {WAITING: "waiting for host", ADAPTER: "adapter start", RUNNING: "worker running",
               TEARDOWN: "teardown"}
NOT_SEEN = "(never reported)"

Phase = namedtuple("Phase", "name start end")


class Row:
    """One process of a rank (its worker, or rank 0's scheduler): what the record says of it."""

    def __init__(self, rank, role, host):
        self.rank, self.role, self.host = rank, role, host
        self.up = self.up_host_t = self.adapter_pid = None
        self.started = self.pid = self.output = None
        self.exit = self.exit_host_t = self.status = self.signal = None
        self.cause = self.by = self.log = self.message = None
        self.exception = None   # what it died of, as its rank found it (rank/exception.py)
        self.tail = []
        self.phases = []
        self.root = False
        self.suspect = False    # the odd rank out of a stacks verdict

    @property
    def skew(self):
        """The host's clock minus the launcher's at "adapter up" (the relay's delay included)."""
        if self.up_host_t is None or self.up is None:
            return None
        return self.up_host_t - self.up


class Attempt:
    def __init__(self, index):
        self.index = index
        self.start = self.starter_start = self.starter_exit = None
        self.teardown_start = self.teardown_end = self.teardown_reason = None
        self.program, self.starter_pid, self.returncode = "mpirun", None, None
        self.status = self.cause = self.root = self.stopped_by = None
        self.lost_hosts = []
        self.log_dir, self.np = None, 0
        self.rows = {}          # (rank, role) -> Row
        self.summary = None
        self.notes = []         # the watchdog's and graceful stops' status lines
        self.stacks = []        # mpilaunch stacks / the stall's dumps: their verdicts (docs/HANGS.md)
        self.waits = []         # (t, every rank's wait share): the monitor's rounds (docs/MONITOR.md)
        self.stragglers = []    # straggler records: named, recovered

    @property
    def end(self):
        times = [t for t in (self.teardown_end, self.starter_exit) if t is not None]
        times += [r.exit for r in self.rows.values() if r.exit is not None]
        return max(times) if times else self.start

    def ranks(self):
        """The rank rows (workers), by rank."""
        return sorted((r for r in self.rows.values() if r.role != "scheduler"),
                      key=lambda r: (r.rank is None, r.rank))

    def by_host(self):
        """[(host, rows)] in the order of each host's lowest rank; a scheduler row right after
        its rank's worker."""
        hosts: "dict[str, list[Row]]" = {}
        for row in sorted(self.rows.values(), key=lambda r: (r.rank is None, r.rank or 0,
                                                              r.role == "scheduler")):
            hosts.setdefault(row.host, []).append(row)
        return list(hosts.items())

    def slowest(self):
        """(row, seconds) of the rank whose worker started last after the starter, the median
        of all, and (host, seconds) of the host whose last rank started last."""
        ref = self.starter_start if self.starter_start is not None else self.start
        started = [(r, r.started - ref) for r in self.ranks() if r.started is not None]
        if not started or ref is None:
            return None
        row, worst = max(started, key=lambda x: x[1])
        per_host: "dict[str, float]" = {}
        for r, s in started:
            per_host[r.host] = max(per_host.get(r.host, s), s)
        host = max(per_host.items(), key=lambda x: x[1])
        return {"row": row, "seconds": worst, "median": statistics.median(s for _, s in started),
                "host": host[0], "host_seconds": host[1], "hosts": len(per_host)}


class Job:
    def __init__(self, path):
        self.path = path
        self.start = None
        self.meta = {}
        self.hosts = {}
        self.preflight = []        # preflight_host records
        self.preflight_span = None
        self.attempts = []
        self.status = None
        self.error = None
        self.finished = False
        self.schema = None

    def attempt(self, index):
        while len(self.attempts) <= index:
            self.attempts.append(Attempt(len(self.attempts)))
        return self.attempts[index]

    @property
    def last(self):
        return self.attempts[-1] if self.attempts else None


def read(path: str):
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


def _row(att, rec, role=None):
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


def _apply(job, rec):
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
        att.starter_start, att.program, att.starter_pid = t, rec.get("program"), rec.get("pid")
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
        att.status, att.cause, att.root = rec.get("status"), rec.get("cause"), rec.get("root")
        att.stopped_by, att.lost_hosts = rec.get("stopped_by"), rec.get("lost_hosts") or []
    elif kind == "summary":
        att.summary = rec.get("text")
    elif kind == "job_end":
        job.status, job.error, job.finished = rec.get("status"), rec.get("error"), True


def _phases(att, row):
    begin = att.starter_start if att.starter_start is not None else att.start
    end = row.exit if row.exit is not None else (att.starter_exit or att.end)
    cut = att.teardown_start
    marks = [(WAITING, begin), (ADAPTER, row.up), (RUNNING, row.started)]
    marks = [(name, t) for name, t in marks if t is not None]
    out = []
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


def build(records, path="events.jsonl") -> Job:
    job = Job(path)
    for rec in records:
        _apply(job, rec)
    for att in job.attempts:
        np = att.np or (job.hosts.get("np") if job.hosts else 0) or 0
        for rank in range(np):            # every planned rank has a row, reported or not
            if (rank, "worker") not in att.rows:
                att.rows[(rank, "worker")] = Row(rank, "worker", NOT_SEEN)
        root = att.root or {}
        for (rank, role), row in att.rows.items():
            worker = att.rows.get((rank, "worker"))
            if role == "scheduler" and worker is not None and row.up is None:
                row.up, row.up_host_t = worker.up, worker.up_host_t   # one adapter starts both
        for row in att.rows.values():
            row.phases = _phases(att, row)
            row.root = (root.get("rank") == row.rank and row.rank is not None
                        and (root.get("role") or "worker") in (row.role, "adapter"))
    return job
