"""The monitor's records, one definition for every part that reads or writes them: the rank's
sample as it crosses the control channel (:class:`Sample`, ``to_wire``/``from_wire``), and the
launcher's view of the job that ``mpilaunch top`` and ``/metrics`` show (:class:`JobView`)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import List, Optional


@dataclass(frozen=True)
class Sample:
    """One rank's measurement of one process (its worker, or rank 0's scheduler) over the last
    interval, taken by the rank's adapter on its own host."""
    rank: int
    role: str                     # "worker" | "scheduler"
    pid: int
    t: float                      # wall time (time.time()) the sample was taken
    cpu_s: float                  # CPU seconds (user+system) of the process and its children so far
    rss: int                      # bytes, the process and its children
    output_t: Optional[float]     # wall time of its last output line; None: none yet
    wait_share: Optional[float]   # 0..1: share of stack samples waiting in a collective over the
                                  # interval; None without a stack sampler
    hot_frame: Optional[str]      # the hottest frame outside collectives, "train.py:41 in load_batch"
    stack_samples: int = 0        # how many stack samples the wait share is from
    sampler: str = "py-spy"       # "py-spy", or "none: <why>" (not installed, ptrace refused)
    host: str = ""                # filled by the launcher from the control channel's hello
    # the commonest places outside a wait, each with its share of the stack samples, commonest
    # first ([["train.py:41 in load_batch", 0.62], ...]): the straggler's own place is the one
    # it spends more time in than the others do (straggler.own_place)
    places: List[List] = field(default_factory=list)

    def to_wire(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_wire(cls, data: bytes, host: str = "") -> "Sample":
        """ValueError for anything that is not a sample (a garbled or foreign message)."""
        try:
            d = json.loads(data.decode("utf-8"))
            known = {f.name for f in fields(cls)}
            s = cls(**{k: v for k, v in d.items() if k in known})
        except (TypeError, UnicodeDecodeError, AttributeError) as exc:
            raise ValueError(f"not a sample: {exc}") from None
        if host:
            s = cls(**{**asdict(s), "host": host})
        return s


@dataclass(frozen=True)
class RankView:
    """One row of ``mpilaunch top`` and one set of labelled ``/metrics`` series."""
    rank: int
    host: str
    role: str
    state: str                    # "running", "exited 0", "exited 3", "signal 9", "starting"
    cpu_s: float                  # CPU seconds of every process it has run this job (never down)
    cpu_pct: Optional[float]      # over the last interval; None before two samples
    rss: int
    output_age: Optional[float]   # seconds since its last output; None: no output yet
    wait_share: Optional[float]
    hot_frame: Optional[str]
    straggler: bool = False
    score: Optional[float] = None  # the straggler rule's score (straggler.py says what it means)
    up: bool = True
    # "cannot tell": its stacks were sampled, but they cannot tell waiting from working (no
    # rank of the last round was seen waiting anywhere, or a wait under backward with no thread
    # state to split it: board.py); wait_share is then None, not 0
    wait_note: str = ""


@dataclass(frozen=True)
class JobView:
    """The launcher's view of the job at time ``t``: what ``top`` draws and ``/metrics`` serves."""
    t: float
    attempt: int
    restarts: int
    np: int
    interval: float               # the monitor's interval (s)
    sampler: str                  # "py-spy", or "none: <why>" (then no wait share)
    ranks: List[RankView] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "JobView":
        d = json.loads(text)
        d["ranks"] = [RankView(**r) for r in d.get("ranks", [])]
        return cls(**d)
