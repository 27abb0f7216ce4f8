"""Log names, which ranks are tailed to the console, and the tail of a log for the status
line (with secret-looking values masked). Pure apart from :func:`read_tail`."""
from __future__ import annotations

import re
import string
TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import FrozenSet, List, Mapping, Optional, Sequence

from mpilaunch.errors import UsageError

DEFAULT_WORKER_LOG_NAME = "worker_{rank}.log"
SCHEDULER_LOG_NAME = "scheduler.log"
PLACEHOLDERS = ("ip", "hostname", "rank")
TAIL_ALL = None  # parse_tail_spec result meaning "every rank"

SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|CRED|PRIVATE|ACCESS_KEY|API_KEY|AUTH"
    r"|(^|_)KEY$|(^|_)(AK|SK)$)", re.IGNORECASE)
MASK = "******"


def parse_tail_spec(raw: str) -> Optional[FrozenSet[int]]:
    """``-1`` -> None (every rank); ``none`` -> empty set; ``"0,3"`` -> {0, 3}."""
    text = str(raw).strip().lower()
    if text in ("-1", "all"):
        return TAIL_ALL
    if text in ("none", ""):
        return frozenset()
    ranks = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(
                f"--tail-worker-log {raw!r}: expected -1, none, or a comma list of ranks")
        ranks.add(int(part))
    return frozenset(ranks)


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


def secret_values(env: Mapping[str, str]) -> List[str]:
    return sorted({v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 4},
                  key=len, reverse=True)


def mask_secrets(lines: Sequence[str], env: Mapping[str, str]) -> List[str]:
    values = secret_values(env)
    out = []
    for line in lines:
        for v in values:
            if v in line:
                line = line.replace(v, MASK)
        out.append(line)
    return out


def read_tail(path: str, n: int = 10, max_bytes: int = 16384) -> List[str]:
    """Last ``n`` lines of ``path`` (decoded leniently, each cut to 500 characters)."""
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
    return [line[:500] for line in lines[-n:]]
