"""What ``mpilaunch logs LOG_DIR`` reads and how it orders it (pure but for :func:`scan`,
:func:`log_lines` and :func:`launcher_gone`, which read files and /proc).

A job's log dir holds ``events.jsonl`` (docs/EVENTS.md) and one ``worker_<rank>.log`` per
rank (or the name ``--worker_log_name`` gave it, which the record keeps), in the log dir itself or, with restarts, in ``attempt<k>/`` (contract.attempt_log_dir).
The record names each rank's host (its adapter's lines carry ``rank`` and ``host``) and when
its worker's log got its first bytes (``first_output``; else the worker's ``process_start``).

The order across ranks. The worker logs hold the worker's bytes verbatim, with no time on a
line. Next to a log the rank side's relay keeps its times index (``.worker_<rank>.log.times``,
mpilaunch/rank/relay.py: times_path): (byte offset, wall time read) of its chunks, one record
at most every 0.05 s; a line's time is then its chunk's (the last record at or before its first
byte: at most 0.05 s early), the rank host's clock. A log without one (a rank whose output
is not relayed: not tailed, torchrun's ``--redirects``; an older job; another tool's), or
whose index does not fit it, has its lines' times estimated: the rank's first output (the record's ``first_output``,
the launcher's clock) plus the line's byte offset's share of the log, times the span from then
to the log's last change (its mtime). Within a rank the order is exact (the file's);
across ranks, lines printed at the same point of the same program (a configuration dump,
an epoch's line) fall together, and a rank that stopped early has its lines early. ``--follow``
prints new lines in the order they reach the files.
"""
from __future__ import annotations

import array
import bisect
import collections
import heapq
import itertools
import json
import os
import re
import string
import sys
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Pattern, Tuple

from mpilaunch.errors import UsageError

EVENTS = "events.jsonl"
DEFAULT_LOG_NAME = "worker_{rank}.log"
_ATTEMPT_DIR = re.compile(r"attempt(\d+)\Z")


class RankLog(NamedTuple):
    """One rank's log in one attempt."""
    attempt: int
    rank: int
    path: str
    host: Optional[str]
    start: Optional[float]   # its log's first bytes (the record's first_output), launcher clock


class Line(NamedTuple):
    t: float          # from the log's times index, else estimated (see the module's doc)
    attempt: int
    rank: int
    text: bytes       # without its newline


class Job(NamedTuple):
    log_dir: str
    logs: List[RankLog]
    ended: bool       # the record has the job's end (or its launcher here died without it)


def parse_ranks(raw: str, name: str = "--rank") -> "frozenset[int]":
    """``7``, ``0,3``, ``0-47``, ``0-3,8`` -> the ranks; UsageError naming ``name`` otherwise."""
    out: "set[int]" = set()
    for part in raw.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (dash and int(hi) < int(lo)):
            raise UsageError(f"{name}={raw!r}: not a rank list; give ranks such as 7, 0,3 or 0-47")
        out.update(range(int(lo), int(hi) + 1) if dash else (int(lo),))
    return frozenset(out)


def parse_duration(raw: str, name: str = "--since") -> float:
    """``90``, ``90s``, ``5m``, ``2h`` -> seconds; UsageError otherwise."""
    text = raw.strip().lower()
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:], None)
    number = text[:-1] if scale else text
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if value < 0 or value != value:
        raise UsageError(f"{name}={raw!r}: not a duration; give seconds (90) or 90s, 5m, 2h")
    return value * (scale or 1.0)


def ranks_and_hosts(records: Iterable[dict]) -> "Tuple[Dict[Tuple[int, int], str], Dict[Tuple[int, int], float], bool, Optional[Tuple[int, str]]]":
    """From the event record: {(attempt, rank): host}, {(attempt, rank): its worker's start},
    whether the job has ended, and the launcher's (pid, host) (None: not recorded)."""
    hosts: Dict[Tuple[int, int], str] = {}
    starts: Dict[Tuple[int, int], float] = {}
    ended = False
    launcher = None
    for rec in records:
        kind = rec.get("kind")
        if kind == "job_end":
            ended = True
        elif kind == "launcher_start" and isinstance(rec.get("pid"), int) and isinstance(rec.get("host"), str):
            launcher = (rec["pid"], rec["host"])
        rank, attempt = rec.get("rank"), rec.get("attempt", 0)
        if not isinstance(rank, int) or not isinstance(attempt, int):
            continue
        if isinstance(rec.get("host"), str):
            hosts.setdefault((attempt, rank), rec["host"])
        # the worker's first output, else its start: when its log's first byte was written
        if kind in ("process_start", "first_output") and rec.get("role") == "worker" \
                and isinstance(rec.get("t"), (int, float)):
            if kind == "first_output" or (attempt, rank) not in starts:
                starts[(attempt, rank)] = float(rec["t"])
    return hosts, starts, ended, launcher


def launcher_gone(launcher: Optional[Tuple[int, str]]) -> bool:
    """The launcher that writes the record has died without its job_end (SIGKILL): it ran on
    this host and its pid is gone. Another host's launcher is never judged gone."""
    if launcher is None or launcher[1] != os.uname().nodename:
        return False
    try:
        os.kill(launcher[0], 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def read_records(log_dir: str) -> List[dict]:
    """The event record's objects (a line being written, or not JSON, is skipped)."""
    out = []
    try:
        with open(os.path.join(log_dir, EVENTS), "rb") as f:
            for raw in f:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
    except OSError:
        pass
    return out


def attempt_dirs(log_dir: str, names: Iterable[str]) -> List[Tuple[int, str]]:
    """[(k, dir)] of a job's attempts, in order: ``attempt<k>/`` when the job logs per
    attempt, else the log dir itself as attempt 0."""
    found = sorted((int(m.group(1)), os.path.join(log_dir, n)) for n in names
                   for m in [_ATTEMPT_DIR.match(n)] if m)
    return found or [(0, log_dir)]


def log_name_pattern(template: str = DEFAULT_LOG_NAME) -> Pattern[str]:
    """The names ``--worker_log_name TEMPLATE`` gives the worker logs, as a pattern whose group
    ``rank`` is the rank ({ip} and {hostname} match any name part; a template without {rank}
    is a one-rank job's: rank 0)."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field == "rank":
            parts.append(r"(?P<rank>\d+)")
        elif field is not None:
            parts.append(r"[^/]*?")
    return re.compile("".join(parts) + r"\Z")


def log_template(records: Iterable[dict]) -> str:
    """The job's --worker_log_name, as its launcher_start record gives it."""
    for rec in records:
        if rec.get("kind") == "launcher_start" and isinstance(rec.get("worker_log_name"), str):
            return rec["worker_log_name"]
    return DEFAULT_LOG_NAME


def worker_logs(names: Iterable[str], template: str = DEFAULT_LOG_NAME) -> List[Tuple[int, str]]:
    """[(rank, name)] of the worker logs (named by ``template``) among ``names``, by rank;
    the relay's hidden indexes are never one."""
    pattern = log_name_pattern(template)
    return sorted((int(m.groupdict().get("rank") or 0), n)
                  for n in names if not n.startswith(".") for m in [pattern.match(n)] if m)


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def scan(log_dir: str) -> Job:
    """The job writing (or that wrote) to ``log_dir``; UsageError, one line, when it is not
    a job's log dir."""
    if not os.path.isdir(log_dir):
        raise UsageError(f"LOG_DIR {log_dir!r}: no such directory; give the --log_dir of a job")
    names = _listdir(log_dir)
    records = read_records(log_dir)
    hosts, starts, ended, launcher = ranks_and_hosts(records)
    template = log_template(records)
    logs = []
    for k, d in attempt_dirs(log_dir, names):
        for rank, name in worker_logs(_listdir(d), template):
            logs.append(RankLog(k, rank, os.path.join(d, name), hosts.get((k, rank), _any_host(hosts, rank)),
                                starts.get((k, rank))))
    if EVENTS not in names and not logs:
        raise UsageError(f"LOG_DIR {log_dir!r}: not an mpilaunch job's log dir (no {EVENTS}, no "
                         f"{template.replace('{rank}', '<rank>')}); give the --log_dir of a job")
    return Job(log_dir, logs, ended or launcher_gone(launcher))


def _any_host(hosts: Dict[Tuple[int, int], str], rank: int) -> Optional[str]:
    """A rank's host from another attempt (an attempt restarted in place keeps its hosts)."""
    return next((h for (_, r), h in sorted(hosts.items()) if r == rank), None)


def select(logs: List[RankLog], ranks: "Optional[frozenset[int]]" = None, host: Optional[str] = None,
           attempt: Optional[int] = None) -> List[RankLog]:
    """The logs a person asked for. A host matches by its name or its first label."""
    out = []
    for log in logs:
        if ranks is not None and log.rank not in ranks:
            continue
        if attempt is not None and log.attempt != attempt:
            continue
        if host is not None and log.host not in (host,) and (log.host or "").split(".")[0] != host:
            continue
        out.append(log)
    return out


def times_path(log_path: str) -> str:
    """A log's times index (as mpilaunch/rank/relay.py names it)."""
    head, name = os.path.split(log_path)
    return os.path.join(head, "." + name + ".times")


Times = Tuple["array.array[int]", "array.array[int]"]   # a times index: offsets, times (ns)


def parse_times(data: bytes, size: int) -> Optional[Times]:
    """A times index's records -> (offsets, times in ns), 8 bytes each held (a day's index at a
    record every 0.05 s: 27 MB), or None when they cannot be a log of ``size`` bytes': none, the
    first not at offset 0, offsets going back or past the end. A partly written last record is
    left out."""
    values = array.array("Q", data[:len(data) - len(data) % 16])
    if sys.byteorder == "big":
        values.byteswap()
    offsets, times = values[0::2], values[1::2]
    if not offsets or offsets[0] != 0 or offsets[-1] > size \
            or any(a > b for a, b in zip(offsets, itertools.islice(offsets, 1, None))):
        return None
    return offsets, times


def line_time(times: Times, offset: int) -> float:
    """The time (s) of a line starting at ``offset``: its chunk's, the last record at or before it."""
    offsets, ns = times
    return ns[max(0, bisect.bisect_right(offsets, offset) - 1)] / 1e9


def read_times(log_path: str, size: int) -> Optional[Times]:
    """The log's times index, parsed (:func:`parse_times`); None when there is none."""
    try:
        with open(times_path(log_path), "rb") as f:
            return parse_times(f.read(), size)
    except OSError:
        return None


def log_lines(log: RankLog, read: Optional[Dict[str, int]] = None) -> Iterator[Line]:
    """One log's lines with their times (the module's doc), read as they are used: a
    log is never held whole. Its size and mtime are taken first; bytes written after are left
    for a follower. With ``read`` (a follower's): complete lines only, and ``read[path]`` the
    offset read up to."""
    try:
        f = open(log.path, "rb")
    except FileNotFoundError:   # removed since the scan (another error is the caller's to say)
        return
    with f:
        st = os.fstat(f.fileno())
        size, mtime = st.st_size, st.st_mtime
        start = log.start if log.start is not None else mtime
        span = max(0.0, max(start, mtime) - start)
        times = read_times(log.path, size)
        off = 0
        for raw in f:
            if off >= size or (read is not None and not raw.endswith(b"\n")):
                break
            t = line_time(times, off) if times else start + (span * off / size if size else 0.0)
            off += len(raw)
            if read is not None:
                read[log.path] = off
            yield Line(t, log.attempt, log.rank, raw[:-1] if raw.endswith(b"\n") else raw)


def _order(ln: Line) -> Tuple[int, float, int]:
    return ln.attempt, ln.t, ln.rank


def merged(logs: List[RankLog], pattern: Optional[Pattern[bytes]] = None, since: Optional[float] = None,
           tail: Optional[int] = None, read: Optional[Dict[str, int]] = None) -> Iterator[Line]:
    """Every line of ``logs`` in estimated time order (ties: the rank, then the file's order),
    filtered by ``pattern`` (searched in the line) and ``since`` (an estimated time), the last
    ``tail`` of them. A merge of the logs read side by side: what it holds is a line a log (and
    ``tail`` lines), whatever their size. With ``read`` (a follower's): complete lines only, and
    each log's path -> the offset read up to."""
    lines: Iterator[Line] = heapq.merge(*(log_lines(log, read) for log in logs), key=_order)
    if pattern is not None:
        lines = (ln for ln in lines if pattern.search(ln.text))
    if since is not None:
        lines = (ln for ln in lines if ln.t >= since)
    if tail is not None:
        return iter(collections.deque(lines, maxlen=tail))
    return lines


def render(lines: Iterable[Line], headers: bool) -> Iterator[bytes]:
    """``[rank<R>] text`` lines; with ``headers``, ``==> attempt <k> <==`` before each
    attempt's first line (as ``tail`` heads each file)."""
    current = None
    for ln in lines:
        if headers and ln.attempt != current:
            current = ln.attempt
            yield f"==> attempt {ln.attempt} <==\n".encode()
        yield b"[rank%d] %s\n" % (ln.rank, ln.text)
