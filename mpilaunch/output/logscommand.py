"""``mpilaunch logs LOG_DIR [--rank R] [--host H] [--attempt K] [--grep PAT] [--since D]
[--tail N] [--follow]``: a job's output as a person asks for it, finished or running, across
its restarts: every rank's lines merged in time order (output/logview.py says how they are
ordered), each with its rank, read from the worker logs the ranks keep whole.

Nothing is started and nothing is written; a LOG_DIR that is not a job's, or a filter that
matches no rank, is one line and exit 2.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Dict, Iterator, List, NoReturn, Optional, Pattern, Sequence

from mpilaunch import __version__
from mpilaunch.errors import UsageError
from mpilaunch.output import logview

FOLLOW_EVERY = 0.2   # s between two looks at a running job's logs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mpilaunch logs", allow_abbrev=False,
                description="A job's output from its worker logs (LOG_DIR/worker_<rank>.log, "
                            "LOG_DIR/attempt<k>/ after restarts), every line with its rank, the "
                            "ranks merged in time order; a finished job's or a running one's.")
    p.add_argument("--version", action="version", version=f"mpilaunch {__version__} (Python "
                   f"{sys.version.split()[0]})")
    p.add_argument("log_dir", metavar="LOG_DIR", help="the job's --log_dir")
    p.add_argument("--rank", metavar="RANKS", help="only these ranks: 7, 0,3, 0-47")
    p.add_argument("--host", metavar="HOST", help="only the ranks that ran on HOST")
    p.add_argument("--attempt", metavar="K", help="only attempt K (0: the first); default: every attempt")
    p.add_argument("--grep", metavar="PATTERN", help="only lines matching this regular expression")
    p.add_argument("--since", metavar="DURATION", help="only lines of the last DURATION (90, 90s, 5m, "
                   "2h; times of finished lines are estimated: see docs/LOGS.md)")
    p.add_argument("--tail", metavar="N", help="only the last N lines (then new ones with --follow)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines while the job runs; ends when the job has ended")
    return p


def _whole(raw: Optional[str], name: str) -> Optional[int]:
    if raw is None:
        return None
    if not raw.strip().isdigit():
        raise UsageError(f"{name}={raw!r}: not a whole number")
    return int(raw)


def _pattern(raw: Optional[str]) -> Optional[Pattern[bytes]]:
    if raw is None:
        return None
    try:
        return re.compile(raw.encode("utf-8", "surrogateescape"))
    except re.error as exc:
        raise UsageError(f"--grep={raw!r}: not a regular expression: {exc}") from None


class Request:
    """What the person asked for, checked."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.log_dir: str = args.log_dir
        self.ranks = logview.parse_ranks(args.rank) if args.rank is not None else None
        self.host: Optional[str] = args.host
        self.attempt = _whole(args.attempt, "--attempt")
        self.pattern = _pattern(args.grep)
        self.since = time.time() - logview.parse_duration(args.since) if args.since is not None else None
        self.tail = _whole(args.tail, "--tail")
        self.follow: bool = args.follow

    def logs(self, job: logview.Job, strict: bool) -> List[logview.RankLog]:
        """The logs asked for; with ``strict``, UsageError when a filter matches nothing the
        job has (a host it never ran on, an attempt it did not make, a rank beyond it)."""
        chosen = logview.select(job.logs, self.ranks, self.host, self.attempt)
        if chosen or not strict or not job.logs:
            return chosen
        if self.host is not None and not logview.select(job.logs, host=self.host):
            known = sorted({log.host for log in job.logs if log.host})
            raise UsageError(f"--host={self.host!r}: no rank of this job ran there (hosts: "
                             f"{', '.join(known) or 'none recorded'})")
        if self.attempt is not None and not logview.select(job.logs, attempt=self.attempt):
            known_k = sorted({log.attempt for log in job.logs})
            raise UsageError(f"--attempt={self.attempt}: this job has no such attempt (attempts: "
                             f"{', '.join(map(str, known_k))})")
        return chosen


def room_for(n_logs: int) -> None:
    """The logs are read side by side, one open file each: raise the soft open-file limit to
    what that needs (at most the hard one), or say which limit to raise."""
    import resource

    need = n_logs + 32   # and the interpreter's own, the record, stdio
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise UsageError(f"ulimit -n {soft} (hard {hard}): too low to read {n_logs} logs side by side; "
                         f"raise it to {need}, or choose fewer with --rank, --host or --attempt")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def main(argv: Sequence[str]) -> int:
    req = Request(parser().parse_args(list(argv)))
    job = logview.scan(req.log_dir)
    read: Optional[Dict[str, int]] = {} if req.follow else None
    logs = req.logs(job, strict=not req.follow or job.ended)
    room_for(len(logs))
    try:
        return _show(req, job, logs, read)
    except BrokenPipeError:   # the reader went away (| head): cli.py's to end quietly
        raise
    except OSError as exc:   # a log it may not read: one line, as any bad input
        raise UsageError(f"{exc.filename or req.log_dir}: {exc.strerror}") from None


def _show(req: Request, job: logview.Job, logs: List[logview.RankLog], read: Optional[Dict[str, int]]) -> int:
    out = sys.stdout.buffer
    headers = req.attempt is None and len({log.attempt for log in job.logs}) > 1
    last: List[Optional[int]] = [None]    # the attempt of the last line written

    def lines() -> Iterator[logview.Line]:
        for ln in logview.merged(logs, req.pattern, req.since, req.tail, read):
            last[0] = ln.attempt
            yield ln
    for chunk in logview.render(lines(), headers):   # as they are read: a big job's logs are never held
        out.write(chunk)
    out.flush()
    if req.follow:
        follow(req, job, read if read is not None else {}, last[0], headers)
    return 0


def follow(req: Request, job: logview.Job, read: Dict[str, int], attempt: Optional[int],
           headers: bool) -> None:
    """Print each log's new complete lines as they arrive (new ranks' and new attempts' logs
    too), until the job's record says it has ended and every log has been read to its end."""
    out = sys.stdout.buffer
    while True:
        ended = job.ended
        for log in req.logs(job, strict=False):
            lines = _new_lines(log, read)
            if req.pattern is not None:
                lines = [ln for ln in lines if req.pattern.search(ln)]
            if lines and headers and log.attempt != attempt:
                attempt = log.attempt
                out.write(f"==> attempt {attempt} <==\n".encode())
            for text in lines:
                out.write(b"[rank%d] %s\n" % (log.rank, text))
        out.flush()
        if ended:
            return
        time.sleep(FOLLOW_EVERY)
        job = logview.scan(req.log_dir)
        headers = headers or (req.attempt is None and len({log.attempt for log in job.logs}) > 1)


def _new_lines(log: logview.RankLog, read: Dict[str, int]) -> List[bytes]:
    """The complete lines ``log`` got since the offset ``read`` holds for it; moves it on."""
    start = read.get(log.path, 0)
    try:
        with open(log.path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    cut = data.rfind(b"\n")
    if cut < 0:
        return []
    read[log.path] = start + cut + 1
    return data[:cut].split(b"\n")
