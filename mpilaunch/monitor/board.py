"""The launcher's board of the running job: every rank's latest sample (``model.Sample``, pushed
by its adapter over the control channel: ``supervise/control.py``'s ``on_sample``), what the
launcher already knows of each rank's process (its exit, from the starter's status lines), the
attempt; judged for stragglers round by round (``straggler.py``). ``mpilaunch top`` and
``/metrics`` read it as a :class:`model.JobView` (:meth:`Board.view`).

One board per job, across its attempts (:meth:`Board.attempt_started` clears what belonged to
the last one). Thread-safe with one lock: the control thread feeds it, the stacks server's
threads read it, the main thread starts attempts. What the rule decides is told outside that
lock (``on_change``, ``on_round``), so a slow stderr never holds a reader up. Cheap to import
(the standard library and ``model.py``): every monitored launch loads it.

A **round** is one sample of every rank: it closes when every rank expected has sent one
since the last, or ``ROUND_WAIT`` intervals after the last round (a rank whose sample is late
is left out of that round, not waited for). A wait share from fewer than ``MIN_STACK_SAMPLES``
stack samples is not judged (its error is over 0.1: docs/MONITOR.md). The rule judges the
**steady** rounds only: those in which every rank had been seen waiting in a collective in an
earlier round (before, some rank is still starting: importing, loading, connecting; the
others wait for it in the rendezvous, which is the start-up the report draws). The same ranks,
at most half, never seen waiting while the others are, ``LAST_ROUNDS`` rounds in a row, are
past their start-up: they reach every collective last.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

from mpilaunch.monitor import straggler
from mpilaunch.monitor.model import JobView, RankView, Sample

if TYPE_CHECKING:   # what is read here of the launcher's records (output/, supervise/: above)
    from typing import Iterable, Protocol, Sequence

    class _Line(Protocol):   # output/summary.py's Event
        @property
        def rank(self) -> Optional[int]: ...
        @property
        def role(self) -> str: ...
        @property
        def event(self) -> str: ...
        @property
        def code(self) -> Optional[int]: ...
        @property
        def signal(self) -> Optional[int]: ...

    class _Collector(Protocol):   # output/summary.py's Collector
        @property
        def events(self) -> Sequence[_Line]: ...
        @property
        def dead(self) -> Sequence[_Line]: ...

    class _Control(Protocol):   # supervise/control.py's Control
        def ranks(self) -> Iterable[int]: ...
        def host_of(self, rank: int) -> str: ...

ROUND_WAIT = 1.5    # intervals after the last round a round closes with the samples it has
STALE = 2.5         # intervals without a sample after which a rank is not waited for
MIN_STACK_SAMPLES = 20   # the fewest stack samples a wait share is judged from
LAST_ROUNDS = 2     # rounds a rank never seen waiting may keep the others from being judged


@dataclass(frozen=True)
class Change:
    """A rank became a straggler (``recovered`` False) or recovered: the record's fields and
    the status line."""
    rank: int
    host: str
    score: straggler.Score
    hot_frame: Optional[str]
    recovered: bool
    line: str

    @property
    def slowdown(self) -> float:
        return self.score.slowdown()

    def fields(self) -> dict:
        """The ``straggler`` record's fields (docs/EVENTS.md)."""
        return {"rank": self.rank, "host": self.host, "score": self.score.score,
                "others_wait": self.score.others, "wait_share": self.score.own,
                "slowdown": self.slowdown, "hot_frame": self.hot_frame,
                "recovered": self.recovered}


class Board:
    """``interval``: the monitor's (s); ``on_change(Change)``: a rank became a straggler or
    recovered; ``on_round(shares)``: a round closed (``shares``: every rank's wait share by
    rank, None where it has none), only when some rank has one."""

    def __init__(self, interval: float,
                 on_change: Optional[Callable[[Change], None]] = None,
                 on_round: Optional[Callable[[List[Optional[float]]], None]] = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.interval = interval
        self.on_change, self.on_round = on_change, on_round
        self.clock, self.wall = clock, wall
        self.lock = threading.Lock()
        self.attempt = self.restarts = self.np = 0
        self.collector: Optional[_Collector] = None   # the running attempt's
        self.control: Optional[_Control] = None
        self.seen: List[straggler.Seen] = []
        self.pauses: List[straggler.Pause] = []
        # CPU seconds of a rank's earlier processes (restarts in place, earlier attempts), so
        # that its CPU counter only ever grows over the job, as Prometheus's counters do
        self.cpu_before: Dict[Tuple[int, str], float] = {}
        self.cpu_last: Dict[Tuple[int, str], Tuple[int, float]] = {}    # (pid, cpu_s)
        self._clear()

    def _clear(self) -> None:
        self.latest: Dict[Tuple[int, str], Tuple[Sample, float, float]] = {}  # (sample, mono, wall)
        self.previous: Dict[Tuple[int, str], Sample] = {}
        self.pending: Dict[int, Sample] = {}
        self.rounds: List[Dict[int, Optional[float]]] = []
        self.waited: Set[int] = set()   # ranks seen waiting in a collective in some round
        self.lagging = 0                # rounds the same few ranks have not been seen waiting
        self.lagging_ranks: List[int] = []
        self.last_round = self.clock()
        self.stragglers: Set[int] = set()
        self.blind = False              # the last round saw no rank wait anywhere
        self.scores: Dict[int, straggler.Score] = {}
        self.open: Dict[int, straggler.Seen] = {}   # the stragglers' records, while they last
        self.pausing: Dict[int, List[Tuple[straggler.Gap, Optional[str]]]] = {}    # runs going on

    # -- the attempts
    def attempt_started(self, index: int, np: int, collector: Optional[_Collector] = None,
                        control: Optional[_Control] = None) -> None:
        with self.lock:
            self._close_spans()
            self._end_pauses()
            self._clear()
            self.attempt, self.restarts, self.np = index, index, np
            self.collector, self.control = collector, control

    def _close_spans(self) -> None:
        now = self.wall()
        for seen in self.open.values():
            start, _ = seen.spans[-1]
            seen.spans[-1] = (start, now)

    # -- the samples
    def feed(self, sample: Sample) -> None:
        """One rank's sample (the control thread's callback)."""
        with self.lock:
            shares, step = self._take(sample)
            changes = self._changes(step) if step is not None else []
        if shares is not None and self.on_round is not None and any(w is not None for w in shares):
            self.on_round(shares)
        for change in changes:
            if self.on_change is not None:
                self.on_change(change)

    def _take(self, sample: Sample) -> Tuple[Optional[List[Optional[float]]], Optional[straggler.Step]]:
        key, now = (sample.rank, sample.role), self.clock()
        old = self.latest.get(key)
        if old is not None and old[0].pid == sample.pid:
            self.previous[key] = old[0]
        else:                           # a new process (restarted in place): no CPU % yet
            self.previous.pop(key, None)
        self.latest[key] = (sample, now, self.wall())
        last = self.cpu_last.get(key)
        if last is not None and last[0] != sample.pid:
            self.cpu_before[key] = self.cpu_before.get(key, 0.0) + last[1]
        self.cpu_last[key] = (sample.pid, sample.cpu_s)
        if sample.role != "worker":
            return None, None
        self.pending[sample.rank] = sample
        np = max(self.np, 1 + max(r for r, _ in self.latest))
        stale = {r for (r, role), (_, t, _) in self.latest.items()
                 if role == "worker" and now - t > STALE * self.interval}
        expected = set(range(np)) - stale
        if not expected <= set(self.pending) and now - self.last_round < ROUND_WAIT * self.interval:
            return None, None
        shares = {r: s.wait_share if s.stack_samples >= MIN_STACK_SAMPLES else None
                  for r, s in self.pending.items()}
        self.pending, self.last_round = {}, now
        record = [shares.get(r) for r in range(np)]
        known = [w for w in shares.values() if w is not None]
        # a synchronous job's ranks wait somewhere every round: none seen waiting means the
        # waits are where the stacks do not show them (an asynchronous collective, NCCL or
        # MindSpore's PyNative, waited for at the next read of a result: docs/MONITOR.md)
        self.blind = len(known) >= 2 and not any(known)
        if not self._steady(shares):
            return record, None
        self.rounds = (self.rounds + [shares])[-straggler.KEEP:]
        step = straggler.step(self.rounds, self.stragglers)
        self.stragglers, self.scores = set(step.stragglers), {**self.scores, **step.scores}
        self._pauses(shares, step)
        return record, step

    def _pauses(self, shares: Dict[int, Optional[float]], step: straggler.Step) -> None:
        """A judged rank the others waited for this round joins its run of such rounds; a run
        ends as a pause when the rank stops being waited for, and is no pause when the rank
        became a straggler (it was the drag's start)."""
        for rank, g in straggler.gaps(shares).items():
            if rank in step.stragglers:
                self.pausing.pop(rank, None)
            elif g.gap >= straggler.PAUSE and rank in step.scores:
                sample = self.latest[(rank, "worker")][0]
                self.pausing.setdefault(rank, []).append((g, self._own_place(rank, sample)))
            elif rank in self.pausing:
                self._paused(rank, self.pausing.pop(rank))

    def _paused(self, rank: int, run: List[Tuple[straggler.Gap, Optional[str]]]) -> None:
        pause = next((p for p in self.pauses if (p.attempt, p.rank) == (self.attempt, rank)), None)
        if pause is None:
            host = self.latest[(rank, "worker")][0].host if (rank, "worker") in self.latest else ""
            pause = straggler.Pause(rank, host, self.attempt)
            self.pauses.append(pause)
        pause.add(run, self.interval)

    def _steady(self, shares: Dict[int, Optional[float]]) -> bool:
        """Whether every rank of this round had been seen waiting before it; learns who waits."""
        known = [r for r, w in shares.items() if w is not None]
        starting = sorted(r for r in known if r not in self.waited)
        # the same ranks, at most half, never seen waiting while the others are, round after
        # round: they reach every collective last (two slow ranks of eight are as past their
        # start-up as one; half: the slow one of two ranks); more than half: the rule could
        # name no one anyway
        few = bool(starting) and 2 * len(starting) <= len(known)
        if few and starting == self.lagging_ranks:
            self.lagging += 1
        else:
            self.lagging = 1 if few else 0
        self.lagging_ranks = starting
        if self.lagging >= LAST_ROUNDS:
            self.waited |= set(starting)
            starting = []
        self.waited |= {r for r in known if shares[r]}
        return not starting

    def _changes(self, step: straggler.Step) -> List[Change]:
        out = []
        now = self.wall()
        for rank in step.became:
            sample = self.latest[(rank, "worker")][0]
            score = step.scores[rank]
            seen = next((x for x in self.seen if (x.attempt, x.rank) == (self.attempt, rank)), None)
            if seen is None:        # its first time in this attempt; else one more span
                seen = straggler.Seen(rank, sample.host, self.attempt, sample.hot_frame)
                self.seen.append(seen)
            self.open[rank] = seen
            seen.spans.append((now, None))
            hot = self._own_place(rank, sample)
            seen.hot_frame = hot or seen.hot_frame
            change = Change(rank, sample.host, score, hot, False,
                            straggler.became_line(rank, sample.host, score, hot))
            seen.add(score.others, change.slowdown)
            out.append(change)
        for rank, seen in self.open.items():    # the worst while it lasts
            now_score = step.scores.get(rank)
            if now_score is not None and rank not in step.became and rank in self.stragglers:
                seen.add(now_score.others, now_score.slowdown())
        for rank in step.recovered:
            seen = self.open.pop(rank)
            seen.spans[-1] = (seen.spans[-1][0], now)
            score = step.scores[rank]
            out.append(Change(rank, seen.host, score, None, True,
                              straggler.recovered_line(rank, seen.host, score)))
        return out

    def _own_place(self, rank: int, sample: Sample) -> Optional[str]:
        """Where a straggler's time goes that the other ranks' does not (straggler.own_place),
        else its hottest place."""
        others = [s.places for (r, role), (s, _, _) in self.latest.items()
                  if role == "worker" and r != rank and s.places]
        return straggler.own_place(sample.places, others) or sample.hot_frame

    # -- what top and /metrics read
    def view(self) -> JobView:
        control = self.control
        # asked before the board's lock is taken: the control channel's lock is never taken
        # under it (the control thread holds its own when it feeds the board)
        connected: Optional[Set[int]] = None
        hosts: Dict[int, str] = {}
        if control is not None:
            connected = set(control.ranks())
            hosts = {r: control.host_of(r) for r in connected}
        with self.lock:
            keys = {(r, "worker") for r in range(self.np)} | set(self.latest)
            rows = [self._row(rank, role, connected, hosts) for rank, role in
                    sorted(keys, key=lambda k: (k[0], k[1] != "worker"))]
            samplers = [s.sampler for (_, role), (s, _, _) in self.latest.items() if role == "worker"]
            sampler = next((s for s in samplers if s != "py-spy"), "py-spy" if samplers else "")
            return JobView(self.wall(), self.attempt, self.restarts, self.np, self.interval,
                           sampler, rows)

    def _row(self, rank: int, role: str, connected: Optional[Set[int]],
             hosts: Dict[int, str]) -> RankView:
        entry = self.latest.get((rank, role))
        state = self._state(rank, role, entry is not None)
        up = state == "running" and (connected is None or rank in connected)
        if entry is None:
            host = hosts.get(rank, "")
            return RankView(rank, "" if host == "?" else host, role, state, 0.0, None, 0, None,
                            None, None, False, None, up)
        s, _, wall_t = entry
        prev = self.previous.get((rank, role))
        pct = None
        if prev is not None and s.t > prev.t:
            pct = round(100.0 * (s.cpu_s - prev.cpu_s) / (s.t - prev.t), 1)
        age = None if s.output_t is None else round(max(0.0, s.t - s.output_t + self.wall() - wall_t), 3)
        score = self.scores.get(rank) if role == "worker" else None
        wait, note = s.wait_share, ""
        if role == "worker" and s.sampler == "py-spy" and s.stack_samples and (
                wait is None or self.blind):
            wait, note = None, "cannot tell"
        cpu = round(self.cpu_before.get((rank, role), 0.0) + s.cpu_s, 3)
        late = role == "worker" and rank in self.stragglers
        return RankView(rank, s.host, role, state, cpu, pct, s.rss, age, wait,
                        self._own_place(rank, s) if late else s.hot_frame, late,
                        score.score if score is not None else None, up, note)

    def _state(self, rank: int, role: str, sampled: bool) -> str:
        """From the starter's status lines (the launcher's Collector): how the process ended."""
        col = self.collector
        if col is not None:
            for e in reversed(list(col.events)):
                if e.rank == rank and e.role == role and e.event in ("exit", "start-failed",
                                                                     "grace-expired"):
                    return f"signal {e.signal}" if e.signal else f"exited {e.code or 0}"
            if role == "worker" and any(e.rank == rank for e in list(col.dead)):
                return "adapter died"
        return "running" if sampled else "starting"

    # -- the end of the job
    def seen_lines(self) -> List[str]:
        """One line per straggler the job had (its summary's), or none."""
        with self.lock:
            return straggler.seen_lines(self.seen, self.wall())

    def pause_lines(self) -> List[str]:
        """One line per rank that paused the job without being a straggler, or none (a run
        of rounds still going on at the end counts)."""
        with self.lock:
            self._end_pauses()
            return straggler.pause_lines(self.pauses)

    def _end_pauses(self) -> None:
        for rank in [r for r in self.pausing if r not in self.stragglers]:
            self._paused(rank, self.pausing.pop(rank))
