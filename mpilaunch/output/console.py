"""The console of a job with many ranks: identical lines collapse, a budget caps the rest.

Every rank's console line reaches the launcher on the starter's stdout as ``[rank<R>] text``
(the rank side's relay, rank/relay.py; every backend alike). When several ranks print the same
text, the console shows it once with its ranks: ``[rank0-47] text``, ``[rank0,2,5] text``.

* A line waits at most ``window`` s (:class:`Collapser`): it is held in arrival order with the
  ranks that printed the same text since; it is shown once no rank can join it any more (every
  rank that prints to the console has printed it or a later line: in a job whose ranks keep
  step, as soon as the slowest rank has printed its own line of that step), or once it is
  ``window`` s old, whichever is first, and never before a line that arrived before it (the
  console keeps the order lines arrived in). A line only one rank prints is thus shown within
  ``window`` s, alone with its own rank, as it came.
* A rank's lines keep their order: its line joins a held group only if that group came after
  its previous line's; a rank that prints the same line twice shows it twice.
* Lines that are not a rank's (the starter's own messages, a partial line's continuation) are
  kept in order and never wait on their own.
* Memory: what arrived in the last ``window`` s, at most :data:`HELD_BYTES` (then the oldest
  line is shown early).

The worker logs are untouched: the ranks write every byte there before any reaches the console.

Above ``budget`` bytes a second of the ranks' distinct lines (:class:`Budget`: a line that joins
another rank's costs the console nothing), the console says so once and, while over, shows only
rank 0's lines, the lines of ranks that failed, and lines several ranks printed alike; the logs
keep everything (``mpilaunch logs``, docs/LOGS.md).
"""
from __future__ import annotations

import os
import select
import threading
import time
from collections import deque
from typing import IO, Callable, Deque, Dict, Iterable, List, Optional, Set, cast

HELD_BYTES = 8 << 20     # the most the collapser holds, whatever the window
PARTIAL_AFTER = 0.1      # s: a partial line (a prompt, a progress bar) is shown after this
HELD_BACK_LINES = 50     # a rank's last lines the budget did not show, kept in case it fails
_RUN = None              # the pattern of a run of one rank's lines (compiled at a first flood)


def ranks_text(ranks: Iterable[int]) -> str:
    """0,1,2,3,5,7,8 -> ``0-3,5,7,8``: runs of three or more as a range."""
    out: List[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{rs[i]}-{rs[j]}")
        else:
            out.extend(str(r) for r in rs[i:j + 1])
        i = j + 1
    return ",".join(out)


RANKS_CHARS = 48   # a longer rank list (scattered ranks of a big job) is cut: its count instead


def ranks_label(ranks: List[int]) -> bytes:
    """The prefix's rank list: :func:`ranks_text`, cut after :data:`RANKS_CHARS` characters at a
    comma with how many ranks there are (``0,2,4,...,98 (50 ranks)``)."""
    text = ranks_text(ranks)
    if len(text) > RANKS_CHARS:
        text = text[:text.rindex(",", 0, RANKS_CHARS)] + f",...,{max(ranks)} ({len(set(ranks))} ranks)"
    return text.encode()


def split_rank(line: bytes) -> "tuple[int, bytes] | None":
    """``[rank7] text\\n`` -> (7, ``text\\n``); None for a line that is not a rank's."""
    if not line.startswith(b"[rank"):
        return None
    end = line.find(b"] ", 5, 16)
    if end < 0 or not line[5:end].isdigit():
        return None
    return int(line[5:end]), line[end + 2:]


class _Group:
    __slots__ = ("seq", "text", "ranks", "t", "capped")

    def __init__(self, seq: int, text: bytes, rank: Optional[int], t: float, capped: bool = False) -> None:
        self.seq, self.text, self.t, self.capped = seq, text, t, capped
        self.ranks: List[int] = [] if rank is None else [rank]


class Collapser:
    """The collapsing, pure: lines in with the time they arrived, bytes out for the console.
    ``expected``: how many ranks print to the console (a group with that many is complete).
    ``budget``: a :class:`Budget` (a line that came while it was spent is shown only if it
    keeps it), or None."""

    def __init__(self, window: float, expected: int, budget: "Optional[Budget]" = None) -> None:
        self.window, self.expected = window, max(1, expected)
        self.held: Deque[_Group] = deque()
        self.open: Dict[bytes, List[_Group]] = {}     # text -> its held groups, oldest first
        self.last: Dict[int, int] = {}                # rank -> the seq of its last line's group
        self.seq = 0
        self.held_bytes = 0
        self.budget = budget

    def add(self, line: bytes, now: float) -> None:
        """One whole line (with its newline) as it came from the starter."""
        self.seq += 1
        # split_rank, inline: this runs for every line of every rank
        end = line.find(b"] ", 5, 16) if line.startswith(b"[rank") else -1
        digits = line[5:end]
        if end < 0 or not digits.isdigit():
            self.held.append(_Group(self.seq, line, None, now))
            self.held_bytes += len(line)
            return
        rank, text = int(digits), line[end + 2:]
        last = self.last.get(rank, 0)
        for g in self.open.get(text, ()) if self.window else ():   # 0: collapsing off (the budget on)
            if g.seq > last:
                g.ranks.append(rank)
                self.last[rank] = g.seq
                return
        budget = self.budget
        if budget is not None:    # what the console would show: a line joining a group costs nothing
            budget.seen(len(text) + 10, now)
        g = _Group(self.seq, text, rank, now, budget is not None and budget.over)
        self.held.append(g)
        self.open.setdefault(text, []).append(g)
        self.last[rank] = self.seq
        self.held_bytes += len(text)

    def add_block(self, block: bytes, now: float) -> None:
        """Whole lines shown as they are, in their place, none of them joined or joinable."""
        self.seq += 1
        self.held.append(_Group(self.seq, block, None, now))
        self.held_bytes += len(block)

    def due(self) -> Optional[float]:
        """When the oldest held line is shown at the latest (None: nothing is held)."""
        return self.held[0].t + self.window if self.held else None

    def take(self, now: float, everything: bool = False) -> bytes:
        """What the console shows now: held lines from the oldest on, while each is complete,
        old enough, not a rank's, or held beyond :data:`HELD_BYTES` (or all, ``everything``)."""
        out: List[bytes] = []
        held, limit = self.held, now - self.window
        # every rank has printed a line at or after this seq: a group up to it can grow no more
        final = min(self.last.values()) if held and len(self.last) >= self.expected else 0
        while held:
            g = held[0]
            if not (everything or not g.ranks or g.seq <= final or len(g.ranks) >= self.expected
                    or g.t <= limit or self.held_bytes > HELD_BYTES):
                break
            held.popleft()
            self.held_bytes -= len(g.text)
            if not g.ranks:
                out.append(g.text)
                continue
            same = self.open[g.text]
            same.pop(0)
            if not same:
                del self.open[g.text]
            if not g.capped or self.budget is None or self.budget.keep(g.ranks, g.text):
                out.append(b"[rank%s] %s" % (ranks_label(g.ranks), g.text) if len(g.ranks) > 1
                           else b"[rank%d] %s" % (g.ranks[0], g.text))
        return b"".join(out)


class Budget:
    """The console's rate cap: ``budget`` bytes a second of the ranks' lines, counted by the
    second. Once a second's are spent, the console says so (once in the job: :meth:`notice`),
    and for the rest of that second only rank 0's lines, a failed rank's and lines several
    ranks printed alike pass (:meth:`keep`)."""

    def __init__(self, budget: int, log_hint: str) -> None:
        self.budget, self.log_hint = budget, log_hint
        self.t0, self.count = 0.0, 0
        self.over = False
        self.said = False
        self.failed: Set[int] = set()
        self.dropped = 0
        self.held_back: Dict[int, Deque[bytes]] = {}    # rank -> its last lines not shown

    def seen(self, n: int, now: float) -> None:
        """``n`` bytes of the ranks' lines came at ``now``."""
        if now - self.t0 >= 1.0:   # a new second: every rank's lines pass until it is spent
            self.t0, self.count, self.over = now, 0, False
        self.count += n
        if self.budget and self.count > self.budget:
            self.over = True

    def keeps(self, rank: int) -> bool:
        """Does a spent budget still show this rank's own lines (rank 0's, a failed rank's)?"""
        return rank == 0 or rank in self.failed

    def keep(self, ranks: List[int], text: bytes) -> bool:
        """Show a line that came while the budget was spent?"""
        if len(ranks) > 1 or ranks[0] == 0 or ranks[0] in self.failed:
            return True
        self.dropped += 1
        kept = self.held_back.get(ranks[0])
        if kept is None:
            kept = self.held_back[ranks[0]] = deque(maxlen=HELD_BACK_LINES)
        kept.append(text)
        return False

    def hold_back_run(self, rank: int, run: bytes, prefix: int) -> None:
        """A run of ``rank``'s whole lines (each with its ``prefix``-byte ``[rank<R>] ``) not
        shown, taken at once: its last few lines kept, in case the rank fails."""
        lines = run.split(b"\n")
        self.dropped += len(lines) - 1
        kept = self.held_back.get(rank)
        if kept is None:
            kept = self.held_back[rank] = deque(maxlen=HELD_BACK_LINES)
        kept.extend(line[prefix:] + b"\n" for line in lines[-HELD_BACK_LINES - 1:-1])

    def fail(self, rank: int) -> bytes:
        """Rank ``rank`` failed: its lines pass from now on; the last ones the budget held back
        (its traceback, printed before it exited) to show now."""
        self.failed.add(rank)
        kept = self.held_back.pop(rank, None)
        if not kept:
            return b""
        return (f"mpilaunch: console: rank {rank} failed; its last {len(kept)} line(s), held back by "
                f"the console's budget:\n").encode() + b"".join(b"[rank%d] %s" % (rank, t) for t in kept)

    def notice(self) -> bytes:
        """The one line that says the console is capped (once, at its first line held back)."""
        if not self.dropped or self.said:
            return b""
        self.said = True
        return (f"mpilaunch: console: the ranks' lines are over {self.budget} bytes/s; while they are, "
                f"the console shows rank 0, failed ranks and lines several ranks print; every line is "
                f"in {self.log_hint}\n").encode()


class CollapseRelay(threading.Thread):
    """The starter's stdout -> ``write`` through a :class:`Collapser` (and a :class:`Budget`).
    ``feed``: every byte as it came (the Collector's bounded tail of the starter's messages);
    ``on_data``: called at each chunk (the start-up line goes)."""

    def __init__(self, stream: IO[bytes], write: Callable[[bytes], None], feed: Callable[[str], None],
                 window: float, expected: int, budget: Optional[Budget] = None,
                 on_data: Optional[Callable[[], None]] = None) -> None:
        super().__init__(name="stdout-collapse", daemon=True)
        self.stream, self.fd = stream, stream.fileno()   # the stream held: its fd stays open
        self.write, self.feed, self.on_data = write, feed, on_data
        self.budget = budget
        self.collapser = Collapser(window, expected, budget)
        self.lock = threading.Lock()   # failed() comes from the stderr relay's thread

    def failed(self, rank: int) -> None:
        """Rank ``rank`` failed: its lines pass the budget from now on, and those it held back
        are shown (its traceback came before its failure was known)."""
        if self.budget is not None:   # what is held first (its earlier lines), then what it held back
            with self.lock:
                kept = self.budget.fail(rank)
                if kept:
                    self.write(self.collapser.take(time.monotonic(), everything=True) + kept)

    def run(self) -> None:
        try:
            self._relay()
        except Exception:   # never stop draining the starter's stdout (the ranks would block on it)
            import traceback

            self.write(b"mpilaunch: console: collapsing stopped (a bug; please report it): "
                       + traceback.format_exc().encode("utf-8", "replace").replace(b"\n", b" | ") + b"\n")
            while True:
                data = os.read(self.fd, 1 << 20)
                if not data:
                    return
                self.write(data)

    def _relay(self) -> None:
        partial, partial_t = b"", 0.0
        col = self.collapser
        while True:
            now = time.monotonic()
            due = col.due()
            if partial:
                due = min(due, partial_t + PARTIAL_AFTER) if due is not None else partial_t + PARTIAL_AFTER
            if due is None or select.select([self.fd], [], [], max(0.0, due - now))[0]:
                data = os.read(self.fd, 1 << 20)
                if not data:
                    break
                if self.on_data is not None:
                    self.on_data()
                self.feed(data.decode("utf-8", "replace"))
                now = time.monotonic()
                rest = self._lines(partial + data, now)
                if rest and (not partial or b"\n" in data):   # a new partial line: since now
                    partial_t = now
                partial = rest
            if partial and now >= partial_t + PARTIAL_AFTER:   # a prompt: shown as it is
                self._show(now, True, partial)
                partial = b""
            else:
                self._show(now)
        self._show(time.monotonic(), True, partial)

    def _show(self, now: float, everything: bool = False, partial: bytes = b"") -> None:
        """Write what is due, or everything held and then ``partial`` (under the lock:
        :meth:`failed` writes too, from another thread)."""
        with self.lock:
            out = self.collapser.take(now, everything)
            if self.budget is not None:   # said before the lines of the take that held some back
                out = self.budget.notice() + out
            if out or partial:
                self.write(out + partial)

    def _lines(self, data: bytes, now: float) -> bytes:
        """Add ``data``'s whole lines; the partial last line back."""
        cut = data.rfind(b"\n") + 1
        with self.lock:
            if self.budget is not None and self.budget.over:
                self._runs(data[:cut], now)
            else:
                self._add(data[:cut], now)
        return data[cut:]

    def _add(self, body: bytes, now: float) -> None:
        add = self.collapser.add
        for line in body[:-1].split(b"\n") if body else ():   # by "\n" only: a "\r" stays in its line
            add(line + b"\n", now)

    def _runs(self, body: bytes, now: float) -> None:
        """A flood (the budget spent): ``body`` taken a run of one rank's lines at a time (a
        pattern, at C speed). A run whose first line joins a held one (a dump other ranks
        printed) goes line by line; any other, without a look at each line: a run of a rank the
        budget keeps is shown as it came, another's is held back whole. The per-line
        Python is what would slow a flooding job: ~3-4 us a line against the relay's bulk copy."""
        global _RUN
        if _RUN is None:
            import re

            _RUN = re.compile(rb"^\[rank(\d+)\] [^\n]*\n(?:\[rank\1\] [^\n]*\n)*", re.M)
        budget, pos = cast(Budget, self.budget), 0
        for m in _RUN.finditer(body):
            self._add(body[pos:m.start()], now)    # lines not a rank's, in their place
            rank, run = int(m.group(1)), m.group(0)
            prefix = m.end(1) + 2 - m.start()
            if run[prefix:run.index(b"\n") + 1] in self.collapser.open:   # lines alike (a dump): per line
                self._add(run, now)
                pos = m.end()
                continue
            budget.seen(len(run), now)
            if not budget.over:
                self._add(run, now)
            elif budget.keeps(rank):      # rank 0's, a failed rank's: shown as they came
                self.collapser.add_block(run, now)
            else:
                budget.hold_back_run(rank, run, prefix)
            pos = m.end()
        self._add(body[pos:], now)


def expected_ranks(np: int, tailed: "frozenset[int] | None") -> int:
    """How many ranks print to the console: every rank, or those ``--tail_worker_log`` names."""
    return np if tailed is None else len([r for r in tailed if 0 <= r < np])
