"""Where an in-place restart's time went, from the ranks' lifecycle lines (rank/inplace/loop.py
sends them; docs/EVENTS.md, ``restart_phases``).

Each rank's adapter says when it was told to restart (``restart``, with the new attempt's
number), when its last attempt's children were gone (``stopped``), what became of its spare
(``spare-ready``, ``spare-waited``: adopted; ``spare-busy``, ``spare-late``: a fresh worker
instead), when the new worker started (``started``) and when it first wrote output
(``output``). With the failure's own time (the coordinator's ``restart-in-place`` line: when
the failed worker's exit was seen), the restart splits into

* detection: the failure -> the last rank told to restart;
* teardown: -> the last rank's old children gone;
* start: -> the last rank's new worker started (a spare adopted, or a fresh interpreter);
* to first output: -> the last rank's new worker's first output (its imports, the
  rendezvous, the checkpoint and whatever it does before it prints: the launcher cannot see
  inside the script; bench/bench_restart.py times those from the script).

Each phase ends at its latest rank: that rank is what the job waits for. The times are the
hosts' clocks (one clock on one host; NTP's skew across hosts).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:
    from mpilaunch.output.summary import Event

MARKS = ("restart", "stopped", "started", "output")
SPARE_MARKS = {"spare-ready": "ready", "spare-waited": "waited for", "spare-busy": "busy",
               "spare-late": "late"}
PHASES = ("detection", "teardown", "start", "first_output")


class RestartPhases:
    """The marks of every in-place restart of one launch, per attempt and rank."""

    def __init__(self, np: int) -> None:
        self.np = np
        self.told: Dict[int, int] = {}                      # rank -> the attempt it restarts into
        self.marks: Dict[int, Dict[str, Dict[int, float]]] = {}   # attempt -> mark -> rank -> t
        self.failed: Dict[int, float] = {}                  # attempt -> its failure's time
        self.done: set = set()

    def feed(self, event: "Event") -> Optional[Dict[str, Any]]:
        """A lifecycle line; the phases of a restart when this completes them."""
        rank, t = event.rank, event.t
        if rank is None or t is None or event.role != "worker":
            return None
        if event.event == "restart" and event.code is not None:
            self.told[rank] = int(event.code)
        k = self.told.get(rank)
        if k is None or (event.event not in MARKS and event.event not in SPARE_MARKS):
            return None
        self.marks.setdefault(k, {}).setdefault(event.event, {}).setdefault(rank, t)
        return self._complete(k)

    def failure(self, k: int, t: Optional[float]) -> Optional[Dict[str, Any]]:
        """Attempt ``k`` started in place after a failure at ``t`` (the root cause's)."""
        if t is None:
            return None
        self.failed[k] = t
        return self._complete(k)

    def unfinished(self) -> List[Dict[str, Any]]:
        """At the attempt's end: the restarts whose workers never all wrote output (a quiet
        script, or one that failed first), their phases up to the start."""
        return [got for got in (self._complete(k, final=True) for k in sorted(self.failed))
                if got is not None]

    def _complete(self, k: int, final: bool = False) -> Optional[Dict[str, Any]]:
        marks = self.marks.get(k, {})
        if k in self.done or k not in self.failed:
            return None
        have = [m for m in MARKS if len(marks.get(m, {})) >= self.np]
        if have != list(MARKS[:len(have)]) or len(have) < (len(MARKS) - 1 if final else len(MARKS)):
            return None
        self.done.add(k)
        ends = [self.failed[k]] + [max(marks[m].values()) for m in have]
        phases: Dict[str, Optional[float]] = {name: None for name in PHASES}
        phases.update({name: round(max(0.0, b - a), 3)
                       for name, a, b in zip(PHASES, ends, ends[1:])})
        spare: Dict[str, int] = {}
        for mark, how in SPARE_MARKS.items():
            if marks.get(mark):
                spare[how] = len(marks[mark])
        fresh = self.np - sum(spare.values())
        if fresh:
            spare["none"] = fresh
        return {"attempt": k, "total": round(max(0.0, ends[-1] - ends[0]), 3),
                "phases": phases, "spare": spare}


def note(p: Dict[str, Any], np: int) -> str:
    """The attempts' summary: ``p`` (from :meth:`RestartPhases.feed`) in a few words."""
    ph = p["phases"]
    adopted = p["spare"].get("ready", 0) + p["spare"].get("waited for", 0)
    out = ph["first_output"]
    return (f" in {p['total']:.2f} s (detection {ph['detection']:.2f}, teardown "
            f"{ph['teardown']:.2f}, start {ph['start']:.2f}, "
            + (f"to first output {out:.2f}" if out is not None else "no output from every rank")
            + f"; a spare on {adopted} of {np} ranks)")


def with_note(records: List[Any], p: Dict[str, Any], np: int) -> List[Any]:
    """``records`` (the in-place attempts) with attempt ``p['attempt'] - 1``'s line told."""
    return [r._replace(note=r.note + note(p, np)) if r.index == p["attempt"] - 1 else r
            for r in records]
