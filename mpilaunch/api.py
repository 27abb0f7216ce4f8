"""The Python API: ``mpilaunch.launch(script_or_module, args=[...], **options)``.

The options are the command line's, by name (``np=4``, ``log_dir="logs"``,
``max_restarts=2``, ``exec=True``: each flag's dest or any of its spellings with dashes as
underscores), taken from the option table, so the API and the CLI cannot drift apart. The
launch is the CLI's own: ``python -m mpilaunch`` in a child process (its signal handling,
teardown and summary stay exactly the command's; a notebook's own signals are left alone),
with one pipe between the two: the child says ``ready`` once every value is checked, or the
one-line usage error, which :func:`start` raises as :class:`mpilaunch.UsageError` before
anything is started; at the job's end it sends the result on the same pipe (its failures as
the typed records the launcher made of them, output/outcome.py's ``Failure``): nothing is read
back from the event record (docs/EVENTS.md).
"""
from __future__ import annotations

import difflib
import json
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any, Dict, Iterable, List, Mapping, NamedTuple, Optional

from mpilaunch.config import options
from mpilaunch.errors import UsageError
from mpilaunch.output.outcome import Failure, Raised
from mpilaunch.report import model

API_FD = "MPILAUNCH_API_FD"   # the child's end of the pipe (events.py writes it)

# The root cause: a Failure (kind, cause, rank, host, role, code, signal, exception, log,
# message, pid; ``text``: the cause, as the summary says it)
RootCause = Failure
__all__ = ["launch", "start", "Launch", "Result", "Failure", "Raised", "RootCause", "RankRecord"]


class RankRecord(NamedTuple):
    """One rank process (a worker, or rank 0's scheduler) of the last attempt: pid, exit status
    and who stopped it (by: itself, teardown); started and exited on the launcher's clock."""

    rank: Optional[int]
    host: Optional[str]
    role: str
    pid: Optional[int]
    status: Optional[int]
    signal: Optional[int]
    cause: Optional[str]
    by: Optional[str]
    log: Optional[str]
    started: Optional[float]
    exited: Optional[float]


class Result(NamedTuple):
    """A finished launch: ``status`` (the CLI's exit status), ``root_cause`` (the first of
    ``failures``, or None), ``ranks`` (RankRecord list), ``attempts``, ``events_path``,
    ``log_dir``, ``summary`` (the failure summary's text, or None), ``failures`` (the last
    attempt's, typed: the root cause first, then every other process that failed on its own)."""

    status: int
    root_cause: Optional[Failure]
    ranks: List[RankRecord]
    attempts: int
    events_path: Optional[str]
    log_dir: Optional[str]
    summary: Optional[str]
    failures: List[Failure] = []

    @property
    def ok(self) -> bool:
        return self.status == 0


def _names() -> Dict[str, "options.Opt"]:
    run = [o for o in options.OPTIONS if options.RUN in o.commands and o.kind not in ("hidden", "version")]
    out = {f.lstrip("-").replace("-", "_"): o for o in run for f in o.flags}
    # a dest wins over another option's flag spelled alike: monitor_interval is the sampling
    # interval's dest (cfg.monitor_interval) and also torchrun's --monitor-interval flag
    out.update((o.dest, o) for o in run)
    return out


def argv_for(script_or_module: str, args: Iterable[object] = (), **opts: object) -> List[str]:
    """The ``mpilaunch`` command line of a launch (UsageError: one line naming the option)."""
    names = _names()
    module = opts.pop("module", opts.pop("m", False))
    if module not in (True, False):
        raise UsageError(f"module={module!r}: give True (script_or_module is a module, "
                         "python -m) or False")
    argv = []
    for name, value in opts.items():
        o = names.get(name)
        if o is None:
            near = difflib.get_close_matches(name, list(names), 1)
            raise UsageError(f"{name}: no such option" + (f"; did you mean {near[0]}?" if near
                             else "; launch() takes the command line's options by name"))
        if o.dest == "dry_run":
            raise UsageError(f"{name}: launch() starts the job; for the argv run "
                             "mpilaunch --dry-run")
        if value is None or value is False and o.kind == "switch":
            continue
        if o.kind == "switch":
            if value is not True:
                raise UsageError(f"{name}={value!r}: a switch; give True or False")
            argv.append(o.name)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            argv.append(f"{o.name}={value}")
        else:
            raise UsageError(f"{name}={value!r}: give a string or a number, as on the command line")
    if not isinstance(script_or_module, str) or not script_or_module:
        raise UsageError(f"script_or_module={script_or_module!r}: give a script path or, with "
                         "module=True, a module name")
    if isinstance(args, str):
        raise UsageError(f"args={args!r}: give a list of arguments, not one string")
    words = [str(a) for a in args]
    return argv + (["-m", script_or_module] if module else [script_or_module]) + words


class Launch:
    """A running launch: :meth:`wait` for its :class:`Result`, :meth:`stop` to end it as a
    SIGTERM to the command does (every rank torn down; status 143)."""

    def __init__(self, proc: subprocess.Popen, events_path: "str | None", log_dir: "str | None",
                 pipe: Optional[IO[bytes]] = None):
        self.proc, self.pid = proc, proc.pid
        self.events_path, self.log_dir = events_path, log_dir
        # the launch's last line on the pipe (its result), read as it comes: a long one must
        # not wait on a full pipe while wait() waits on the process
        self._said: List[bytes] = []
        self._reader: Optional[threading.Thread] = None
        if pipe is not None:
            self._reader = threading.Thread(target=self._read, args=(pipe,), daemon=True)
            self._reader.start()

    def _read(self, pipe: IO[bytes]) -> None:
        with pipe:
            self._said.append(pipe.read())

    def poll(self) -> "int | None":
        return self.proc.poll()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: "float | None" = None) -> Result:
        rc = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join()   # its end of the pipe closed as it exited
        said = b"".join(self._said).decode("utf-8", "replace")
        return _result(said, self.events_path, self.log_dir, 128 - rc if rc < 0 else rc)

    def __enter__(self) -> "Launch":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()
            self.proc.wait()


def _result(said: str, path: "str | None", log_dir: "str | None", returncode: int) -> Result:
    """The launch's result line (``result JSON``, output/events.py's ``result``); without one
    (the launcher was killed, or ended before its first attempt) only its exit status."""
    word, _, rest = said.strip().partition(" ")
    try:
        res: Dict[str, Any] = json.loads(rest) if word == "result" else {}
    except ValueError:
        res = {}
    if not isinstance(res, dict) or not res:
        return Result(returncode, None, [], 0, path, log_dir, None, [])
    status = res["status"] if isinstance(res.get("status"), int) else returncode
    failures = [Failure.from_json(f) for f in res.get("failures") or []] if status else []
    att = model.build(res.get("records") or []).last   # the ranks' records, as the report reads them
    rows = sorted(att.rows.values(), key=lambda r: (r.rank is None, r.rank, r.role)) if att else []
    ranks = [RankRecord(row.rank, row.host, row.role, row.pid, row.status, row.signal, row.cause,
                        row.by, row.log, row.started, row.exit) for row in rows]
    return Result(status, failures[0] if failures else None, ranks, int(res.get("attempts") or 0),
                  path, log_dir, res.get("summary"), failures)


def start(script_or_module: str, args: Iterable[object] = (), *,
          env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
          stdout: "int | IO[Any] | None" = None, stderr: "int | IO[Any] | None" = None,
          **options: object) -> Launch:
    """Check every option (UsageError, nothing started) and start the launch; a handle.
    ``env``: the launcher's environment (default: this process's; the ModelArts variables
    are read from it as the command reads them); ``stdout``/``stderr``: where the launcher's
    output goes (default: this process's); the job's stdin is /dev/null."""
    argv = argv_for(script_or_module, args, **options)
    env = dict(os.environ if env is None else env)
    rfd, wfd = os.pipe()
    env[API_FD] = str(wfd)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mpilaunch", *argv], env=env, cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                pass_fds=(wfd,))
    finally:
        os.close(wfd)
    pipe = os.fdopen(rfd, "rb")
    line = pipe.readline().decode("utf-8", "replace").rstrip("\n")
    word, _, rest = line.partition(" ")
    if word == "error":
        pipe.close()
        proc.wait()
        raise UsageError(rest)
    log_dir = os.path.dirname(rest) if word == "ready" and rest else None
    return Launch(proc, rest if word == "ready" and rest else None, log_dir, pipe)


def launch(script_or_module: str, args: Iterable[object] = (), **options: Any) -> Result:
    """Run the job to its end (:func:`start`, then :meth:`Launch.wait`)."""
    with start(script_or_module, args, **options) as job:
        return job.wait()
