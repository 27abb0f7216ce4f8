"""An in-place restart read back from the event record: where its time went (the
restart_phases record, mpilaunch/attempts/phases.py: detection, teardown, start, to first
output, each to its latest rank) and what each rank's new worker was (its adapter's spare
line, else a fresh interpreter). Pure; report/model.py fills it, the HTML and the PNG draw it."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from mpilaunch.attempts.phases import MARKS, PHASES

# An in-place restart's phases, as the restart_phases record times them (attempts/phases.py):
# each ends when its latest rank reached its mark (a rank_status / process_start / first_output).
RESTART_PHASES = PHASES
RESTART_PHASE_NAMES = {"detection": "detection", "teardown": "teardown", "start": "start",
                       "first_output": "to first output"}
RESTART_MARKS = dict(zip(PHASES, MARKS))
# what a rank's new worker was: its adapter's spare line, else a fresh interpreter
SPARE_HOW = {"spare-ready": "spare (ready)", "spare-waited": "spare (waited for)",
             "spare-busy": "fresh (spare busy)", "spare-late": "fresh (spare late)"}
FRESH = "fresh"


class Restart:
    """An in-place restart into attempt ``attempt``: the phases of its restart_phases record
    and what each rank did (its marks, launcher clock, and what its new worker was)."""

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.from_attempt = attempt - 1
        self.total: Optional[float] = None        # None: no restart_phases record (yet)
        self.phases: Dict[str, Optional[float]] = {}
        self.spare: Dict[str, int] = {}
        self.cause: Optional[str] = None          # the restart record's: the failure
        self.marks: Dict[str, Dict[int, float]] = {m: {} for m in RESTART_MARKS.values()}
        self.how: Dict[int, str] = {}

    @property
    def failed(self) -> Optional[float]:
        """When the failure was seen (launcher clock): the first rank told, less the detection."""
        told = self.marks["restart"]
        if not told:
            return None
        return min(told.values()) - (self.phases.get("detection") or 0.0)

    def latest(self, phase: str) -> Optional[int]:
        """The rank that ended ``phase`` (the one the job waited for)."""
        got = self.marks[RESTART_MARKS[phase]]
        return max(got, key=lambda r: (got[r], r)) if got else None

    def spans(self) -> List[Tuple[str, float, float]]:
        """(phase, start, end): one after another from the failure, as the record times them."""
        t = self.failed
        out: List[Tuple[str, float, float]] = []
        for name in RESTART_PHASES:
            seconds = self.phases.get(name)
            if t is None or seconds is None:
                break
            out.append((name, t, t + seconds))
            t += seconds
        return out

    def ranks_by_how(self, np: int) -> List[Tuple[str, List[int]]]:
        """[(what the new worker was, its ranks)], spares first; a rank without a spare line
        got a fresh interpreter."""
        by: Dict[str, List[int]] = {}
        for rank in range(max([np] + [r + 1 for r in self.how])):
            by.setdefault(self.how.get(rank, FRESH), []).append(rank)
        order = list(SPARE_HOW.values()) + [FRESH]
        return sorted(by.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)

    def text(self, np: int) -> str:
        """The restart in one line (the HTML page's and the PNG's words)."""
        head = f"restarted in place from attempt {self.from_attempt}"
        if self.total is None:
            words = "; its phases were not recorded"
        else:
            parts = []
            for name in RESTART_PHASES:
                seconds, rank = self.phases.get(name), self.latest(name)
                if seconds is None:
                    parts.append(f"{RESTART_PHASE_NAMES[name]}: not every rank got there")
                else:
                    parts.append(f"{RESTART_PHASE_NAMES[name]} {seconds:.3f} s"
                                 + (f" (rank {rank})" if rank is not None else ""))
            words = f" in {self.total:.3f} s: " + ", ".join(parts)
        who = "; ".join(f"{how}: {_ranks(ranks)}" for how, ranks in self.ranks_by_how(np))
        return head + words + (f"; new workers: {who}" if who else "")


def _ranks(ranks: List[int]) -> str:
    """``rank 3`` / ``ranks 0-2, 5``."""
    runs: List[List[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    words = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
    return ("rank " if len(ranks) == 1 else "ranks ") + words
