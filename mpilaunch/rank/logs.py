"""Log names, which ranks are tailed to the console, and the tail of a log for the status
line (secret values masked, then cut). Pure apart from :func:`read_tail` / :func:`status_tail`.

The tail spec itself (``--tail-worker-log``) is parsed by :func:`mpilaunch.contract.parse_tail_spec`;
secrets are masked by :func:`mpilaunch.contract.mask_lines` (the one rule for both sides)."""
from __future__ import annotations

import string

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


def check_log_name(template: str) -> None:
    """UsageError unless ``template`` only uses {ip}, {hostname}, {rank}."""
    if not template.strip():
        raise UsageError("--worker-log-name is empty")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise UsageError(f"--worker-log-name {template!r}: {exc}") from None
    for f in fields:
        if f not in PLACEHOLDERS:
            raise UsageError(
                f"--worker-log-name {template!r}: unknown placeholder {{{f}}} (use {{ip}}, "
                f"{{hostname}}, {{rank}})")


def worker_log_name(template: str, rank: int, hostname: str, ip: str) -> str:
    check_log_name(template)
    return template.format(rank=rank, hostname=hostname, ip=ip)


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
