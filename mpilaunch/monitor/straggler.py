"""The straggler rule: which rank holds a synchronous job back, from every rank's wait share
(the share of its stack samples spent waiting in a collective: ``model.Sample.wait_share``).

In a synchronous job one slow rank sets the pace: every other rank reaches the collective
first and waits there for it, while the slow rank arrives last and hardly waits. So the rule
compares each rank's wait share with the others': its **gap** is the median of the other
ranks' wait shares minus its own. With every rank alike the gaps are noise around 0; the rank
the others wait for has a gap as large as the share of the step they spend waiting for it.

* **score**: the rank's gap averaged over the last ``WINDOW`` rounds it has one in (a round:
  one sample of every rank, ``board.py``), so one noisy round does not name a rank.
* a rank **becomes** a straggler when its score is ``ON`` or more **and** its gap was ``OFF``
  or more in each of the last ``PERSIST`` rounds, and **recovers** when its score falls below
  ``OFF`` (hysteresis: a rank near the threshold does not come and go each round).
* **a drag, not a pause**: a straggler slows every step, so the others wait for it in every
  round; a rank that pauses once (a checkpoint, an evaluation, a GC pause) or every N steps
  (rank 0 saving every 500 steps, a logging burst) lifts the others' wait in the one or two
  rounds that hold the pause and not in the rounds between. ``PERSIST`` rounds in a row tell
  them apart: a pause shorter than ``PERSIST - 1`` intervals that leaves a whole round free
  before the next is never named; one in every round is a drag (it is one).
* **the start-up is not judged**: a rank is judged from the round after the first one it is
  seen waiting in a collective in (``reached``; the board judges only rounds in which every
  rank has: ``board.py``).
* **slowdown**: the others are busy ``1 - others`` of the time; without the straggler they
  would wait only as long as it does (its own wait share: the collective's own cost), so the
  job runs ``(1 - own) / (1 - others)`` times as long as it would.

What the rule will not judge (it says nothing rather than guess): a rank without a wait share
(no stack sampler on its host), a round with fewer than two ranks that have one (one rank
waits for no one), a rank not yet seen waiting. A rank of an exited or unjudged round keeps
its state.

The threshold's measurement: docs/MONITOR.md, "The straggler rule". Pure: rounds in, a
:class:`Step` out; no clock, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

ON = 0.30       # score to become a straggler (docs/MONITOR.md: balanced jobs stay below 0.15)
OFF = 0.15      # score under which a straggler has recovered
WINDOW = 2      # rounds a score averages
PERSIST = 3     # rounds in a row a rank's gap must be OFF or more to become a straggler
KEEP = max(WINDOW, PERSIST)     # the rounds the rule reads
BUSY_FLOOR = 0.05   # the least busy share a slowdown is computed against
# a round's gap at which the others waited for a rank that is no straggler: a pause. Rank 0's
# 3.5 s saves in tests/e2e/test_straggler_ddp.py's rounds: 0.47 and 0.63; the largest
# single-round gap of a rank never named, over 12 jobs' rounds on this machine: 0.28
PAUSE = 0.4


@dataclass(frozen=True)
class Gap:
    """One rank in one round: its own wait share, the median of the others', the difference."""
    own: float
    others: float

    @property
    def gap(self) -> float:
        return self.others - self.own


def gaps(shares: Mapping[int, Optional[float]]) -> Dict[int, Gap]:
    """rank -> its :class:`Gap` in one round (``shares``: rank -> wait share or None); empty
    when fewer than two ranks have a wait share."""
    known = sorted((w, r) for r, w in shares.items() if w is not None)
    n = len(known)
    if n < 2:
        return {}
    out = {}
    for i, (w, r) in enumerate(known):
        # the median of the others: the sorted values without position i
        def at(k: int) -> float:
            return known[k if k < i else k + 1][0]
        m = n - 1
        others = at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2
        out[r] = Gap(w, others)
    return out


@dataclass(frozen=True)
class Score:
    """A rank's score (its mean gap over the window) and the last round's wait shares: its
    own and the others' median."""
    score: float
    own: float
    others: float

    def slowdown(self) -> float:
        """How many times as long the job runs as it would without the others' wait for it."""
        # the others' busy share is measured from a few dozen stack samples: under 5% it is
        # a sample or two, and a ratio against it says nothing more than "20x or more"
        return round(max(1.0, (1.0 - self.own) / max(1.0 - self.others, BUSY_FLOOR)), 2)


@dataclass(frozen=True)
class Step:
    """The rule's judgement after a round. ``scores``: every rank judged this round;
    ``stragglers``: the ranks held back by after it; ``became`` / ``recovered``: the changes."""
    scores: Dict[int, Score]
    stragglers: Tuple[int, ...]
    became: Tuple[int, ...]
    recovered: Tuple[int, ...]


def scores(rounds: Sequence[Mapping[int, Optional[float]]],
           reached: Optional[AbstractSet[int]] = None) -> Dict[int, Score]:
    """rank -> its :class:`Score` over the last ``WINDOW`` of ``rounds`` (oldest first), for
    every rank with a gap in the last round. ``reached``: the ranks seen waiting before those
    rounds (None: every rank); another rank's gaps count from the round after the first of
    them it waits in."""
    window = list(rounds[-WINDOW:])
    recent = [gaps(r) for r in window]
    if not recent:
        return {}
    out = {}
    for rank in recent[-1]:
        first = 0
        if reached is not None and rank not in reached:
            first = 1 + next((i for i, r in enumerate(window) if (r.get(rank) or 0.0) > 0.0),
                             len(window))
            if first >= len(window):
                continue        # not seen in a collective before this round: still starting
        mine = [g[rank] for g in recent[first:] if rank in g]
        score = sum(g.gap for g in mine) / len(mine)
        out[rank] = Score(round(score, 3), round(mine[-1].own, 3), round(mine[-1].others, 3))
    return out


def step(rounds: Sequence[Mapping[int, Optional[float]]], current: AbstractSet[int],
         reached: Optional[AbstractSet[int]] = None) -> Step:
    """Judge the last of ``rounds`` (rank -> wait share, oldest first); ``current``: the
    stragglers before it; ``reached``: as :func:`scores`."""
    sc = scores(rounds, reached)
    now = set()
    for rank in set(current) | set(sc):
        s = sc.get(rank)
        if s is None:
            if rank in current:     # not judged this round: keeps its state
                now.add(rank)
        elif rank in current and s.score >= OFF:
            now.add(rank)
        elif s.score >= ON and persists(rounds, rank):
            now.add(rank)
    return Step(sc, tuple(sorted(now)), tuple(sorted(now - set(current))),
                tuple(sorted(set(current) - now)))


def persists(rounds: Sequence[Mapping[int, Optional[float]]], rank: int) -> bool:
    """Whether ``rank``'s gap was ``OFF`` or more in each of the last ``PERSIST`` rounds."""
    last = list(rounds[-PERSIST:])
    if len(last) < PERSIST:
        return False
    for r in last:
        g = gaps(r).get(rank)
        if g is None or g.gap < OFF:
            return False
    return True


def own_place(own: Sequence[Sequence], others: Sequence[Sequence[Sequence]]) -> Optional[str]:
    """The place where a rank spends more of its time than the others do (``own``: its
    ``[place, share]`` pairs; ``others``: each other rank's), None when no place of its is
    above the others' median share of it. A straggler's hottest place can be one every rank
    shares: in a framework's job (Lightning's or the Hugging Face Trainer), the library's own
    forward, backward and optimizer run under the one line of the script that calls ``fit`` or
    ``train``, as long on every rank; the slow reader's frame is where the straggler's time goes
    that the others' does not."""
    if not own or not others:
        return None
    best, lead = None, 0.0
    for place, share in own:
        theirs = sorted(dict((p, s) for p, s in o).get(place, 0.0) for o in others)
        m = len(theirs)
        median = theirs[m // 2] if m % 2 else (theirs[m // 2 - 1] + theirs[m // 2]) / 2
        if share - median > lead:
            best, lead = place, share - median
    return best


def pct(share: float) -> str:
    return f"{round(share * 100)}%"


def became_line(rank: int, host: str, s: Score, hot_frame: Optional[str]) -> str:
    """The launcher's status line for a rank that became a straggler."""
    where = f" on host {host}" if host else ""
    text = (f"rank {rank}{where} is holding the job back: others wait {pct(s.others)} of the "
            f"time for it")
    return text + (f"; its time goes to {hot_frame}" if hot_frame else "")


def recovered_line(rank: int, host: str, s: Score) -> str:
    where = f" on host {host}" if host else ""
    return (f"rank {rank}{where} no longer holds the job back: others wait {pct(s.others)} of "
            f"the time, it waits {pct(s.own)}")


def seen_lines(seen: Sequence["Seen"], now: float) -> List[str]:
    """The end of job's lines: one per straggler seen (``now``: the job's end, for one that
    had not recovered)."""
    out = []
    for s in seen:
        held = sum((end if end is not None else now) - start for start, end in s.spans)
        times = len(s.spans)
        text = (f"rank {s.rank}" + (f" on host {s.host}" if s.host else "")
                + (f" (attempt {s.attempt})" if s.attempt else "")
                + f": held the job back {held:.0f} s" + (f" ({times} times)" if times > 1 else "")
                + f", others waited up to {pct(s.others)} of the time for it (the job "
                f"{s.slowdown:g}x as long, the median of its rounds)")
        out.append(text + (f"; its time went to {s.hot_frame}" if s.hot_frame else ""))
    return out


@dataclass
class Seen:
    """A straggler the job had: its spans (start, end or None while it lasts), the others'
    highest wait share, the median slowdown of its rounds (one round's is noisy: the others'
    busy share is a few stack samples) and the slowdowns it is the median of."""
    rank: int
    host: str
    attempt: int
    hot_frame: Optional[str]
    others: float = 0.0
    slowdown: float = 1.0
    spans: List[Tuple[float, Optional[float]]] = field(default_factory=list)
    slowdowns: List[float] = field(default_factory=list)

    def add(self, others: float, slowdown: float) -> None:
        """One more round as a straggler."""
        self.others = max(self.others, others)
        self.slowdowns.append(slowdown)
        ordered = sorted(self.slowdowns)
        self.slowdown = ordered[len(ordered) // 2]


@dataclass
class Pause:
    """A rank the others waited for (a gap of ``PAUSE`` or more) in runs of rounds too short to
    be a drag (``PERSIST``): a checkpoint, an evaluation, a logging burst. ``times``: the runs;
    ``seconds``: the others' wait for it (each round's gap times the interval); ``others``: the
    others' highest wait share; ``hot_frame``: its place in its longest wait."""
    rank: int
    host: str
    attempt: int
    hot_frame: Optional[str] = None
    times: int = 0
    seconds: float = 0.0
    others: float = 0.0
    worst: float = 0.0

    def add(self, run: Sequence[Tuple[Gap, Optional[str]]], interval: float) -> None:
        """One more run of rounds it paused in (each round's gap and place)."""
        self.times += 1
        for g, hot in run:
            self.seconds += g.gap * interval
            self.others = max(self.others, g.others)
            if g.gap > self.worst:
                self.worst, self.hot_frame = g.gap, hot or self.hot_frame


def pause_lines(pauses: Sequence[Pause]) -> List[str]:
    """The end of job's lines for the pauses: one per rank that paused the job."""
    out = []
    for p in pauses:
        text = (f"rank {p.rank}" + (f" on host {p.host}" if p.host else "")
                + (f" (attempt {p.attempt})" if p.attempt else "")
                + f": paused the job {p.times} time" + ("s" if p.times > 1 else "")
                + f", about {p.seconds:.0f} s in all (others waited up to {pct(p.others)} of a "
                f"round for it), never for {PERSIST} rounds in a row: not a straggler")
        out.append(text + (f"; its time went to {p.hot_frame}" if p.hot_frame else ""))
    return out
