"""Log names, which ranks are tailed to the console, and the tail of a log for the status
line (secret values masked, then cut), and the exception a failed worker died of
(:func:`status_exception`). Pure apart from :func:`open_log`, :func:`read_tail`,
:func:`status_tail` and :func:`status_exception`.

The tail spec itself (``--tail-worker-log``) is parsed by :func:`mpilaunch.contract.parse_tail_spec`;
secrets are masked by :func:`mpilaunch.contract.mask_lines` (the one rule for both sides)."""
from __future__ import annotations

import _string   # string.Formatter().parse without string (which imports re)
import os

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import FrozenSet, List, Mapping, Optional

from mpilaunch.contract import mask_lines
from mpilaunch.errors import UsageError

DEFAULT_WORKER_LOG_NAME = "worker_{rank}.log"
SCHEDULER_LOG_NAME = "scheduler.log"
PLACEHOLDERS = ("ip", "hostname", "rank")
TAIL_ALL = None  # contract.parse_tail_spec's result meaning "every rank"
TAIL_LINES = 10          # lines of a log's tail in a status line
TAIL_LINE_CHARS = 500    # each cut to this many characters (after masking)


def is_tailed(spec: Optional[FrozenSet[int]], rank: int) -> bool:
    return spec is TAIL_ALL or rank in spec


def check_log_name(template: str, size: Optional[int] = None,
                   name: str = "--worker-log-name") -> None:
    """UsageError ``NAME=value: why; fix`` unless ``template`` is a plain file name (created in
    the log dir: no directory part, no ``..``, not absolute) using only {ip}, {hostname},
    {rank}, and, when ``size`` > 1 ranks share it, with ``{rank}`` (distinct per rank). The one
    rule: the launcher (mpilaunch/config/rankcheck.py) and every rank check with it."""
    fix = "give a file name such as worker_{rank}.log (it is created in the log dir)"

    def bad(why: str) -> UsageError:
        return UsageError(f"{name}={template!r}: {why}; {fix}")

    if not template.strip():
        raise bad("empty")
    try:
        fields = [f for _, f, _, _ in _string.formatter_parser(template) if f is not None]
    except ValueError as exc:
        raise bad(str(exc)) from None
    for f in fields:
        if f not in PLACEHOLDERS:
            raise bad(f"unknown placeholder {{{f}}} (use {{ip}}, {{hostname}}, {{rank}})")
    if template.startswith("/"):
        raise bad("an absolute path")
    if "/" in template:
        raise bad("has a directory part")
    if template in (".", ".."):
        raise bad("not a file name")
    if size is not None and size > 1 and "rank" not in fields:
        raise bad(f"has no {{rank}}, so the {size} ranks would write one file")


def worker_log_name(template: str, rank: int, hostname: str, ip: str) -> str:
    check_log_name(template)
    return template.format(rank=rank, hostname=hostname, ip=ip)


def _pseudo_fs(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == top or real.startswith(top + "/") for top in ("/proc", "/sys"))


def check_log_dir(path: str, name: str = "--log-dir") -> None:
    """UsageError ``NAME=value: why; fix`` unless log files can be created in ``path`` (made
    if missing). Looks at the file system; nothing is created."""
    fix = "give a writable directory (it is created if missing)"
    if _pseudo_fs(path):
        raise UsageError(f"{name}={path!r}: in /proc or /sys, where no file can be created; {fix}")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UsageError(f"{name}={path!r}: an existing file, not a directory; {fix}")
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"{name}={path!r}: {probe} is a file, not a directory; {fix}")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "not writable" if probe == os.path.abspath(path) else f"{probe} is not writable"
        raise UsageError(f"{name}={path!r}: {what}; {fix}")


# log path -> its modification time right after it was opened (truncated), on the file
# system's own clock: an error file older than that is another run's (status_exception)
OPENED_NS: dict[str, int] = {}


def open_log(path: str) -> int:
    """The log file opened for writing (truncated, append mode); UsageError if it cannot be."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    except OSError as exc:
        raise UsageError(f"log file {path!r} cannot be created: {exc.strerror}; give "
                         f"--log_dir a writable directory") from None
    OPENED_NS[path] = os.fstat(fd).st_mtime_ns
    return fd


def read_tail(path: str, n: int = TAIL_LINES, max_bytes: int = 16384) -> List[str]:
    """Last ``n`` lines of ``path``, decoded leniently and *not* cut (mask first, then cut:
    :func:`status_tail`)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]          # first one is probably cut
    return lines[-n:]


def status_tail(path: str, env: Mapping[str, str]) -> List[str]:
    """The ``tail`` of a status line: the log's last lines with every secret value of ``env``
    masked, each line then cut to :data:`TAIL_LINE_CHARS` characters."""
    return mask_lines(read_tail(path), env, cut=TAIL_LINE_CHARS)


def status_exception(path: str, env: Mapping[str, str], code: Optional[int],
                     sig: Optional[int], cause: str = "self") -> Optional[dict]:
    """The ``exception`` of a failed worker's status line (mpilaunch/rank/exception.py: torch's
    error file, ``TORCHELASTIC_ERROR_FILE`` of its environment, first, else a traceback in its
    log ``path``), secrets of ``env`` masked; None when neither names one, and for a process
    that did not fail on its own (``cause``: the teardown's victims are not looked at)."""
    if cause != "self" or not (code or sig):
        return None
    from mpilaunch.rank import exception   # only after a failure: every rank pays for imports

    return exception.find(env.get("TORCHELASTIC_ERROR_FILE"), path, env, code, sig,
                          since_ns=OPENED_NS.get(path))
