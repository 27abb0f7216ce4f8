"""``mpilaunch top LOG_DIR``'s table: one row per rank from the launcher's :class:`JobView`
(what the job's monitor measured), drawn once (``--once``) or redrawn in place like htop.

Plain ANSI control sequences (home, clear to end of line, the alternate screen), no terminal
library: a table redrawn every interval needs nothing more, and the command starts in the time
of its socket round trip (docs/MONITOR.md). The answer comes from an ``ask`` function the
command passes in (stacks/command.py: the running launcher's socket), so this module only draws.
"""
from __future__ import annotations

import os
import select
import sys
import time
from typing import Callable, List, Optional, Sequence, TextIO

from mpilaunch.monitor.model import JobView, RankView

COLUMNS = (("RANK", ">"), ("HOST", "<"), ("ROLE", "<"), ("STATE", "<"), ("CPU%", ">"),
           ("RSS", ">"), ("OUTPUT", ">"), ("WAIT", ">"), ("", "<"), ("WHERE", "<"))
# s between two tables, as htop's 1.5 s and top's 3 s: the samples change once a monitor interval
# (5 s by default), the output ages and the states in between; an ask costs the job nothing
REFRESH = 2.0


def size(n: int) -> str:
    """Bytes as ``ps`` and htop print them: 980K, 312M, 1.2G."""
    value, unit = float(n), ""
    for unit in ("K", "M", "G", "T"):
        value /= 1024
        if value < 1024:
            break
    if n < 1024:
        return str(n)
    return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"


def age(seconds: Optional[float]) -> str:
    """Seconds since the last output: 4s, 3m05s, 2h10m; ``-`` when there was none."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def percent(share: Optional[float], scale: float = 100.0) -> str:
    return "-" if share is None else f"{share * scale:.0f}"


def row(r: RankView) -> List[str]:
    wait = r.wait_note or percent(r.wait_share)
    state = "disconnected" if r.state == "running" and not r.up else r.state   # its adapter
    return [str(r.rank), r.host, r.role, state,
            percent(r.cpu_pct, 1.0), size(r.rss), age(r.output_age),
            wait if not wait[-1:].isdigit() else wait + "%", "straggler" if r.straggler else "",
            r.hot_frame or ""]


def header(view: JobView) -> str:
    ranks = sum(1 for r in view.ranks if r.role == "worker") or view.np
    every = (f"sampled every {view.interval:g} s" if view.interval > 0
             else "monitor off (--sample-interval 0): states only")
    text = f"mpilaunch top: {ranks} rank{'s' if ranks != 1 else ''}, attempt {view.attempt}, restarts {view.restarts}, {every}"
    stragglers = [r for r in view.ranks if r.straggler]
    if stragglers:
        text += "; straggler: " + ", ".join(f"rank {r.rank} on {r.host}" for r in stragglers)
    return text


def render(view: JobView, width: Optional[int] = None, height: Optional[int] = None) -> str:
    """The table as text; ``width``/``height``: a terminal's, to cut lines and rows to fit."""
    rows = [row(r) for r in sorted(view.ranks, key=lambda r: (r.rank, r.role != "worker"))]
    lines = [header(view)]
    if not view.sampler.startswith("py-spy") and view.interval > 0:
        lines.append(f"no wait share: {view.sampler.split(': ', 1)[-1]}")
    hidden = 0
    if height is not None and len(rows) + len(lines) + 1 > height:
        room = max(1, height - len(lines) - 2)
        keep = [row for row in rows if row[8]][:room]            # stragglers always shown
        keep += [row for row in rows if not row[8]][:room - len(keep)]
        hidden, rows = len(rows) - len(keep), sorted(keep, key=lambda x: int(x[0]))
    table = [[name for name, _ in COLUMNS]] + rows
    # a column no row has a value in (no straggler, no hot frame) is left out, its title too
    widths = [max(len(r[i]) for r in table) if any(r[i] for r in rows) else 0
              for i in range(len(COLUMNS))]
    for r in table:
        cells = [f"{c:{align}{w}}" for c, (_, align), w in zip(r, COLUMNS, widths)]
        lines.append("  ".join(c for c, w in zip(cells, widths) if w).rstrip())
    if hidden:
        lines.append(f"... {hidden} more rows: the terminal is {height} lines high")
    if width is not None:
        lines = [line[:width].rstrip() for line in lines]
    return "\n".join(lines) + "\n"


# -- the live view ------------------------------------------------------------------------

HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
ALT_ON, ALT_OFF = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"   # alternate screen, no cursor


class Ended(Exception):
    """The job's launcher no longer answers: the job has ended."""


def live(view: JobView, ask: Callable[[], JobView], out: TextIO = sys.stdout,
         keys: Optional[int] = None) -> int:
    """Draw ``view``, then ``ask()``'s every REFRESH s until the job ends, ``q`` (with ``keys``:
    a terminal's fd, read a key at a time) or Ctrl-C; the last table stays on the screen.
    -> exit status."""
    said = ""
    out.write(ALT_ON)
    try:
        while True:
            term = os.get_terminal_size(out.fileno())   # 0 x 0: a terminal that does not say
            text = render(view, term.columns or None, term.lines - 1 if term.lines > 1 else None)
            out.write(HOME + text.replace("\n", CLEAR_LINE + "\n") + CLEAR_BELOW)
            out.flush()
            if _quit(keys, REFRESH):
                break
            try:
                view = ask()
            except Ended as end:
                said = f"mpilaunch: {end}\n"
                break
    except KeyboardInterrupt:
        pass
    finally:
        out.write(ALT_OFF)
    out.write(render(view) + said)   # as htop's last screen, kept after the program
    out.flush()
    return 0


def _quit(keys: Optional[int], wait: float) -> bool:
    """Wait ``wait`` s; True when ``q`` was typed meanwhile."""
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if keys is None:
            time.sleep(left)
            return False
        ready, _, _ = select.select([keys], [], [], left)
        if ready and os.read(keys, 16)[:1] in (b"q", b"Q"):
            return True


def batch(view: JobView, ask: Callable[[], JobView], out: TextIO = sys.stdout,
          count: Optional[int] = None) -> int:
    """Not a terminal: a table after another, as ``top -b`` prints them, until the job ends."""
    n = 0
    while True:
        out.write(render(view))
        out.flush()
        n += 1
        if count is not None and n >= count:
            return 0
        time.sleep(REFRESH)
        try:
            view = ask()
        except Ended as end:
            out.write(f"mpilaunch: {end}\n")
            return 0
        out.write("\n")


def with_keys(run: Callable[[Optional[int]], int], stdin: Sequence[TextIO] = (sys.stdin,)) -> int:
    """``run(fd)`` with the terminal's keys read one at a time (no echo), restored after."""
    try:
        import termios
        import tty

        fd = stdin[0].fileno()
        saved = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError, AttributeError):
        return run(None)
    tty.setcbreak(fd)
    try:
        return run(fd)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
