"""``mpilaunch top LOG_DIR [--once]``: every rank of a running job, live, from a second
terminal (docs/MONITOR.md): the launcher's view of the job (monitor/board.py), asked for at its
socket (the one ``mpilaunch stacks`` uses: stacks/server.py, named in ``LOG_DIR``), drawn by
monitor/top.py. The launcher answers from what its adapters already sent it: asking costs the
ranks nothing, across hosts as on one.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Sequence

from mpilaunch.config import options
from mpilaunch.errors import UsageError
from mpilaunch.monitor import top
from mpilaunch.monitor.model import JobView
from mpilaunch.stacks import command

TIMEOUT = 10.0      # s for the launcher's answer: it answers from memory
BETWEEN = 0.5       # s between two tries while the job is between two attempts


class NoView(Exception):
    """The launcher runs but keeps no view of its ranks (the monitor is off)."""


def ask(log_dir: str) -> JobView:
    """The running launcher's view; UsageError when none runs, NoView when it has none."""
    data = command.request(log_dir, "top", TIMEOUT, "to measure it")
    answer = json.loads(data)
    if "error" in answer:
        raise NoView(answer["error"])
    return JobView.from_json(data.decode())


def follow(log_dir: str, pid: int) -> Callable[[], JobView]:
    """``ask`` for the live view: between two attempts (no socket while the launcher lives),
    it waits for the next; once the launcher has ended, top.Ended."""
    def again() -> JobView:
        while True:
            try:
                return ask(log_dir)
            except (UsageError, NoView):
                if not _alive(pid):
                    raise top.Ended(f"the job writing to {log_dir} has ended "
                                    f"(mpilaunch pid {pid})") from None
            time.sleep(BETWEEN)
    return again


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # someone else's: not our launcher any more
        return False
    return True


def main(argv: Sequence[str]) -> int:
    args = options.parser(options.TOP).parse_args(list(argv))
    _, pid = command.pointer(args.log_dir)
    try:
        view = ask(args.log_dir)
    except NoView as exc:
        print(f"mpilaunch: {exc}", file=sys.stderr)
        return 1
    if args.top_once:
        sys.stdout.write(top.render(view))
        return 0
    again = follow(args.log_dir, pid)
    if not sys.stdout.isatty():
        return top.batch(view, again)
    return top.with_keys(lambda keys: top.live(view, again, keys=keys))
