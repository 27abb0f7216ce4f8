"""The launcher's side of the monitor for one job: its board (``monitor/board.py``), made when
the monitor is on, and what the board's judgements become: a ``wait_share`` record per round
and a ``straggler`` record and one status line per change (docs/EVENTS.md, docs/MONITOR.md);
at the job's end the stragglers it had, one line each."""
from __future__ import annotations

import sys
from typing import Any, List, Optional

from mpilaunch.output import events


def board_for(cfg: Any) -> Any:
    """The job's board, or None when the monitor is off (``--monitor-interval 0``, or a
    launch without adapters that stay: ``--exec``)."""
    interval = float(getattr(cfg, "monitor_interval", 0) or 0)
    if interval <= 0 or getattr(cfg, "exec_mode", False):
        return None
    from mpilaunch.monitor.board import Board

    return Board(interval, on_change=told, on_round=recorded)


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
