"""The event record of a job: ``LOG_DIR/events.jsonl``, one JSON object a line (docs/EVENTS.md).

Written by the launcher only, from what it learns anyway: its own steps (start, hosts,
preflight, the starter, teardown, restarts, the final status) and the ranks' status lines
(``relays.py`` hands every one to :func:`status`; the adapters add lifecycle lines for
"adapter up", "child started" and "first output", rank/status.py). Each record has the
launcher's clock (``t``); a record that came from a rank also keeps that host's own clock
(``host_t``), so a skew between the hosts shows instead of being hidden.

Cheap by construction: one ``os.write`` of one line per record into a file opened once with
O_APPEND (no lock: appends of one line do not interleave, and a record written from a signal
handler cannot wait on a lock a relay thread holds), nothing at all when no record is open
(unit tests that call ``supervise.starter.run_attempt`` directly, ``--dry-run``, a usage error). Every string
goes through the one secret rule (``contract.mask_lines`` for the values of this
environment's secret variables, ``contract.mask_value`` for ``NAME=VALUE`` words).
"""
from __future__ import annotations

import itertools
import os
import re
import sys
import time

from mpilaunch import __version__, contract, procstat
from mpilaunch.output.jsonline import dumps
from mpilaunch.output.outcome import PROCESS, event_status
from mpilaunch.output.summary import who

TYPE_CHECKING = False
if TYPE_CHECKING:   # shapes.py: what is read here of the records of the layers above
    from typing import Any, Dict, List, Mapping, Optional, Sequence
    from mpilaunch.output.shapes import Attempt, Backend, Config, Failure, Plan, Resilience, Result
    from mpilaunch.output.summary import Collector, Event

SCHEMA = 1
FILENAME = "events.jsonl"
REPORT_COMMAND = "mpilaunch report"
_ASSIGN = r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S*)"   # NAME=VALUE words (compiled when first met)


class Kind:
    """The record's kinds, each spelled once: every emitter names its kind from here, and
    docs/EVENTS.md documents every one (a test holds both)."""

    LAUNCHER_START = "launcher_start"
    HOSTS = "hosts"
    PREFLIGHT_START = "preflight_start"
    PREFLIGHT_HOST = "preflight_host"
    PREFLIGHT_END = "preflight_end"
    ATTEMPT_START = "attempt_start"
    STARTER_START = "starter_start"
    ADAPTER_UP = "adapter_up"
    PROCESS_START = "process_start"
    FIRST_OUTPUT = "first_output"
    PROCESS_EXIT = "process_exit"
    ADAPTER_DEAD = "adapter_dead"
    RANK_STATUS = "rank_status"
    STACKS = "stacks"
    SIGNAL = "signal"
    TEARDOWN_START = "teardown_start"
    STARTER_EXIT = "starter_exit"
    LEFTOVERS_ENDED = "leftovers_ended"
    TEARDOWN_END = "teardown_end"
    SCHEDULER_STOP = "scheduler_stop"
    ATTEMPT_END = "attempt_end"
    SUMMARY = "summary"
    RESTART = "restart"
    RESTART_PHASES = "restart_phases"
    NO_PROGRESS = "no_progress"
    HOST_CHECK = "host_check"
    SHRINK = "shrink"
    DISCOVERY = "discovery"
    WAIT_SHARE = "wait_share"
    STRAGGLER = "straggler"
    JOB_END = "job_end"


class _Record:
    def __init__(self, fd: int, path: str, log_dir: str, env: Mapping[str, str]) -> None:
        self.fd, self.path, self.log_dir = fd, path, log_dir
        self.secret_env = {k: v for k, v in env.items() if v and contract.is_secret(k)}
        self.seq = itertools.count()
        self.attempt = 0
        self.teardown: "str | None" = None     # why this attempt's teardown started (once per attempt)
        self.preflight_t0: "float | None" = None
        self.exception: "Mapping[str, Any] | None" = None   # the last root cause's (job_end)
        self.summary: "str | None" = None   # the last failure summary (the API's result)
        # what the API's ranks are drawn from (report/model.py): kept only while it listens
        self.kept: "List[Dict[str, Any]] | None" = [] if _api_fd is not None else None


_rec = None
# fds of ended records: closed only when the next one opens (a late relay thread writing to a
# closed fd number could hit a file opened since)
_closed: "list[int]" = []


_api_fd = None   # the Python API's pipe (mpilaunch/api.py), until its last line
# the kinds the API's result reads its ranks from (report/model.py's rows)
_RESULT_KINDS = frozenset({"hosts", "attempt_start", "starter_start", "starter_exit",
                           "teardown_start", "adapter_up", "process_start", "process_exit"})


def api_channel(value: Optional[str]) -> None:
    """``MPILAUNCH_API_FD`` as cli.main took it from the environment (never passed on: not
    inherited by anything this process starts)."""
    global _api_fd
    try:
        _api_fd = int(value) if value else None
        if _api_fd is not None:
            os.set_inheritable(_api_fd, False)
    except (ValueError, OSError):
        _api_fd = None


def tell_api(word: str, text: str) -> bool:
    """One line to the API's pipe: ``ready EVENTS_PATH`` once every value is checked, then
    ``result JSON`` at the job's end (:func:`job_end`); or ``error MESSAGE``. The pipe is
    closed after its last line. False when no API is listening."""
    global _api_fd
    fd = _api_fd
    if fd is None:
        return False
    if word != "ready":
        _api_fd = None
    try:
        os.write(fd, f"{word} {text}".replace("\n", " ").encode("utf-8", "replace") + b"\n")
        if word != "ready":
            os.close(fd)
    except OSError:
        return False
    return True


def path() -> "str | None":
    """The open record's file, or None."""
    return _rec.path if _rec is not None else None


def _mask(value: object) -> Any:
    if isinstance(value, str):
        if _rec is not None and _rec.secret_env:
            value = contract.mask_lines([value], _rec.secret_env)[0]
        if "=" in value:
            value = re.sub(_ASSIGN, lambda m: f"{m.group(1)}={contract.mask_value(m.group(1), m.group(2))}",
                           value)
        return value
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v) for v in value]
    return value


def emit(kind: str, t: "float | None" = None, **fields: object) -> None:
    """One record of ``kind`` (docs/EVENTS.md lists them) for the running attempt."""
    rec = _rec
    if rec is None:
        return
    obj = {"v": SCHEMA, "seq": next(rec.seq), "t": round(time.time() if t is None else t, 6),
           "kind": kind, "attempt": rec.attempt}
    obj.update(fields)
    obj = _mask(obj)
    if rec.kept is not None and kind in _RESULT_KINDS:
        rec.kept.append(obj)
    line = dumps(obj) + "\n"
    try:
        os.write(rec.fd, line.encode("utf-8", "replace"))
    except OSError:   # a full disk must not stop the launch: the record just ends there
        pass


def _process_start() -> float:
    """When this process started (the interpreter's start-up belongs to the launch), from
    /proc; now if that cannot be read."""
    now = time.time()
    ticks = procstat.start_time("self")
    if ticks is None:
        return now
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return min(now, now - (uptime - ticks / os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError, IndexError):
        return now


def start(cfg: Config, lr: Resilience, backend: Backend, env: Optional[Mapping[str, str]] = None) -> None:
    """Open ``LOG_DIR/events.jsonl`` (a new job: the file starts empty) and write the
    launcher's start and the hosts. ``lr``: config.resilience.Resilience (its ``log_dir`` is LOG_DIR
    itself, also when each attempt logs to ``LOG_DIR/attempt<k>``)."""
    global _rec

    env = os.environ if env is None else env
    close()
    _close_old()
    log_dir = os.path.abspath(lr.log_dir)
    target = os.path.join(log_dir, FILENAME)
    try:
        os.makedirs(log_dir, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if fd < 3:   # a launcher started with fd 0/1/2 closed: never be its stdin or stdout
            import fcntl

            fd, low = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3), fd
            os.close(low)
    except OSError as exc:
        print(f"mpilaunch: warning: no event record: {target}: {exc.strerror}", file=sys.stderr)
        tell_api("ready", "")
        return
    _rec = _Record(fd, target, log_dir, env)
    tell_api("ready", target)   # every value checked: the API's launch() returns from here on
    emit(Kind.LAUNCHER_START, t=_process_start(), version=__version__, pid=os.getpid(),
         host=os.uname().nodename, argv=list(sys.argv), cwd=os.getcwd(), log_dir=log_dir,
         python=sys.executable, max_restarts=lr.max_restarts,
         worker_log_name=cfg.worker_log_name or "worker_{rank}.log")
    emit(Kind.HOSTS, source=cfg.hosts_source, np=cfg.np, starter=backend.program,
         backend=getattr(backend, "name", backend.program),
         hosts=[{"name": h.name, "slots": h.slots} for h in cfg.hosts])


def close() -> None:
    global _rec
    if _rec is not None:
        _closed.append(_rec.fd)
        _rec = None


def _close_old() -> None:
    while _closed:
        try:
            os.close(_closed.pop())
        except OSError:
            pass


def preflight_start() -> None:
    if _rec is not None:
        _rec.preflight_t0 = time.time()
        emit(Kind.PREFLIGHT_START, t=_rec.preflight_t0)


def preflight(results: List[Result]) -> List[Result]:
    """The preflight's results, recorded per host (each host's checks ran one after the
    other from the preflight's start, so its end is the start + their seconds); returned
    unchanged."""
    if _rec is None:
        return results
    t0 = _rec.preflight_t0 or time.time()
    hosts: Dict[str, List[Result]] = {}
    for r in results:
        if r.host:
            hosts.setdefault(r.host, []).append(r)
    failed = []
    for host, rs in hosts.items():
        verdict = "fail" if any(r.status == "fail" for r in rs) else (
            "warn" if any(r.status == "warn" for r in rs) else "ok")
        if verdict == "fail":
            failed.append(host)
        seconds = sum(r.seconds for r in rs)
        emit(Kind.PREFLIGHT_HOST, host=host, verdict=verdict, start=round(t0, 6),
             end=round(t0 + seconds, 6), seconds=round(seconds, 6),
             checks=[{"check": r.check, "status": r.status, "seconds": round(r.seconds, 6),
                      "message": r.message} for r in rs])
    jobwide = [r for r in results if not r.host and r.status == "fail"]
    emit(Kind.PREFLIGHT_END, verdict="fail" if failed or jobwide else "ok", failed=failed,
         messages=[r.message for r in jobwide])
    return results


def attempt_start(index: int, plan: Plan) -> None:
    if _rec is None:
        return
    _rec.attempt, _rec.teardown, _rec.summary = index, None, None
    log_dir = plan.log_dirs[0] if plan.log_dirs else _rec.log_dir   # nextattempt.log_dir_of's
    emit(Kind.ATTEMPT_START, np=plan.np, log_dir=log_dir,
         hosts=[{"name": h.name, "slots": h.slots} for h in plan.hosts])


def next_attempt_in_place(index: int) -> None:
    """An attempt restarted in place inside the running job: what follows in the record is
    attempt ``index``'s (the same starter, so no attempt_start)."""
    if _rec is not None:
        _rec.attempt, _rec.summary = index, None


def teardown(reason: str) -> None:
    """The job is being ended (the first reason of the attempt is the one recorded)."""
    if _rec is None or _rec.teardown is not None:
        return
    _rec.teardown = reason
    emit(Kind.TEARDOWN_START, reason=reason)


def stop_signal(signum: int) -> None:
    """A stop signal reached the launcher."""
    if _rec is None:
        return
    import signal as _signal

    name = _signal.Signals(signum).name
    emit(Kind.SIGNAL, signal=signum, name=name)
    teardown(f"{name} received by mpilaunch")


_BY = {"self": "itself", "terminated": "teardown", "grace": "graceful stop", "life": "itself"}
_LIFE_KINDS = {"up": Kind.ADAPTER_UP, "started": Kind.PROCESS_START, "output": Kind.FIRST_OUTPUT,
               "exit": Kind.PROCESS_EXIT}


def status(event: Event) -> None:
    """A rank's status line (``summary.Event``), recorded with the launcher's clock."""
    if _rec is None:
        return
    common: Dict[str, Any] = {"rank": event.rank, "host": event.host, "role": event.role,
                              "host_t": event.t}   # Any: spread into emit(), it could name its t
    if event.cause == contract.LIFE_CAUSE:
        kind = _LIFE_KINDS.get(event.event, Kind.RANK_STATUS)
        if kind == Kind.PROCESS_EXIT:
            emit(kind, status=event.code or 0, code=event.code, signal=None, cause="ok",
                 by="itself", **common)
        else:   # a restart's line with its new attempt (``code``: docs/EVENTS.md)
            emit(kind, pid=event.pid, event=event.event, **({} if event.code is None else {"code": event.code}), **common)
        return
    if event.event in ("exit", "start-failed", "grace-expired") or (
            event.role == "adapter" and event.event == "error"):
        emit(Kind.PROCESS_EXIT, status=event_status(event), code=event.code, signal=event.signal,
             cause=event.cause, by=_BY.get(event.cause, event.cause), event=event.event,
             log=event.log, message=event.message, exception=event.exception,
             tail=event.tail, **common)
    else:   # the stall watchdog's stall / progress / done, an adapter's graceful stop, an
            # attempt restarted in place (its root cause's exception with it)
        extra: Dict[str, Any] = {"exception": event.exception} if event.exception else {}
        emit(Kind.RANK_STATUS, event=event.event, cause=event.cause, message=event.message,
             **extra, **common)
    if event.cause == "self" and (event.code or event.signal):
        teardown(f"{who(event)} failed on {event.host}")


def attempt_end(attempt: Attempt, collector: Collector) -> None:
    """The attempt's status, cause and root cause (``supervise.attempt.Attempt`` after
    ``finish``: its ``failures``, the root cause first): ``root`` is that first failure when
    it is a process's."""
    if _rec is None:
        return
    first = attempt.failures[0] if attempt.failures else None
    root = first if first is not None and first.kind == PROCESS else None
    exc = root.exception.detail if root is not None and root.exception is not None else None
    _rec.exception = exc   # job_end's, if last
    emit(Kind.ATTEMPT_END, status=attempt.status, cause=attempt.cause,
         stopped_by=attempt.stopped_by, lost_hosts=collector.lost_hosts(),
         root=None if root is None else {
             "rank": root.rank, "host": root.host or "?", "role": root.role, "code": root.code,
             "signal": root.signal, "log": root.log, "message": root.message,
             "exception": exc})


def summary(text: str) -> str:
    """Record the failure summary; the line that ends it: how to see the job's timeline."""
    if _rec is None:
        return ""
    _rec.summary = text
    emit(Kind.SUMMARY, text=text)
    return hint()


def hint() -> str:
    if _rec is None:
        return ""
    import shlex

    return f"  timeline: {REPORT_COMMAND} {shlex.quote(_rec.log_dir)}\n"


def job_end(status: "int | None", attempts: int, error: "str | None" = None,
            failures: "Sequence[Failure]" = ()) -> None:
    """The record's last line: the job's exit status (None: an error of the launcher's own
    ended it before any attempt, ``error``); with the last attempt's root cause's exception
    (``exception``, null when it named none). The Python API gets the result (``failures``:
    the last attempt's, the root cause first) on its pipe."""
    rec = _rec
    exc = rec.exception if rec is not None and status else None
    if error is None:
        emit(Kind.JOB_END, status=status, attempts=attempts, exception=exc)
    else:
        emit(Kind.JOB_END, status=status, attempts=attempts, error=error, exception=exc)
    close()
    if _api_fd is not None:
        tell_api("result", dumps(_mask(result(rec, status, attempts, failures))))


def result(rec: "_Record | None", status: "int | None", attempts: int,
           failures: "Sequence[Failure]") -> "dict[str, object]":
    """What the Python API returns, as this process knows it (no file read back): the
    failures, and the records its ranks are drawn from (the report's model of them)."""
    return {"status": status, "attempts": attempts,
            "summary": rec.summary if rec is not None else None,
            "failures": [f.to_json() for f in failures],
            "records": rec.kept if rec is not None and rec.kept is not None else []}
