"""The launcher's side of the monitor for one job: its board (``monitor/board.py``), made when
the monitor is on, and what the board's judgements become: a ``wait_share`` record per round
and a ``straggler`` record and one status line per change (docs/EVENTS.md, docs/MONITOR.md);
at the job's end the stragglers it had, one line each.

The board is made when it is first needed (:class:`LazyBoard`): the first sample, ``top``, a
scrape of /metrics. Its modules (and the dataclasses they are made of, with inspect) cost CPU
a launch would otherwise spend while its ranks start (docs/ARCHITECTURE.md, start-up); a job shorter than one monitor interval never loads them."""
from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from mpilaunch.output import events

if TYPE_CHECKING:
    from mpilaunch.monitor.board import Board
    from mpilaunch.monitor.model import JobView, Sample


def board_for(cfg: Any) -> Optional[LazyBoard]:
    """The job's board, or None when the monitor is off (``--sample-interval 0``, or a
    launch without adapters that stay: ``--exec``)."""
    interval = float(getattr(cfg, "monitor_interval", 0) or 0)
    if interval <= 0 or getattr(cfg, "exec_mode", False):
        return None
    return LazyBoard(interval)


class LazyBoard:
    """The job's ``monitor.board.Board`` behind the board's own calls, made (its modules
    imported) by the first ``feed`` or ``view``, from whichever thread calls. The last
    attempt's start is kept until then and given to the board as it came, at the time it came
    (the board's clock reads that time while it takes it): its first round waits from the
    attempt's start, as a board made at the job's start does."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.lock = threading.Lock()
        self.made: Optional[Board] = None
        self.started: Optional[Tuple[float, Tuple[Any, ...]]] = None   # (its time, its arguments)
        self.replaying: Optional[float] = None     # the time the clock reads, while replaying

    def clock(self) -> float:
        return self.replaying if self.replaying is not None else time.monotonic()

    def board(self) -> Board:
        with self.lock:
            if self.made is None:
                from mpilaunch.monitor.board import Board

                board = Board(self.interval, on_change=told, on_round=recorded, clock=self.clock)
                if self.started is not None:
                    self.replaying, args = self.started
                    try:
                        board.attempt_started(*args)
                    finally:
                        self.replaying = None
                self.made = board
            return self.made

    def attempt_started(self, index: int, np: int, collector: Any = None, control: Any = None) -> None:
        with self.lock:
            if self.made is None:     # nothing of the last attempt's to close: kept for later
                self.started = (time.monotonic(), (index, np, collector, control))
                return
        self.made.attempt_started(index, np, collector, control)

    def feed(self, sample: Sample) -> None:
        self.board().feed(sample)

    def view(self) -> JobView:
        return self.board().view()

    def seen_lines(self) -> List[str]:
        return self.made.seen_lines() if self.made is not None else []   # none without a sample


def recorded(shares: List[Optional[float]]) -> None:
    events.emit(events.Kind.WAIT_SHARE, shares=shares)


def told(change: Any) -> None:
    """``monitor.board.Change``: recorded, and said in one line."""
    events.emit(events.Kind.STRAGGLER, **change.fields())
    print(f"mpilaunch: {change.line}", file=sys.stderr, flush=True)


def end_lines(board: Any) -> str:
    """The stragglers the job had, for the end of its output ('' for none)."""
    lines = board.seen_lines() if board is not None else []
    if not lines:
        return ""
    return (f"mpilaunch: {len(lines)} straggler(s) seen\n"
            + "".join(f"  {line}\n" for line in lines))
