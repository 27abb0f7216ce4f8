"""When ``mpilaunch check --deep`` measures what (mpilaunch/check/deep.py does it): the
windows that fit the budget, the links of the ring, the waves they run in, the retest of a
slow link, the rounds of a host. Pure."""
from __future__ import annotations

import random
from typing import List, NamedTuple, Optional, Sequence

from mpilaunch.check import outliers

SEED = 20240611            # the --pairs sample is the same at every run of the same host list


ROUNDS = 2   # host-by-host passes, the second in reverse order: a load that comes and goes
            # on a shared machine then falls on every host alike, not on the one measured then


class Windows(NamedTuple):
    """Seconds each probe measures for."""

    compute: float
    memory: float
    disk: float
    net: float


GEMM_MAX_SHARED = 4   # hosts of one machine beyond which the compute probe is the Python loop
HOST_OVERHEAD = 0.015  # s per host and round besides the windows (fork, fsync, answers)
LINK_OVERHEAD = 0.01   # s per link besides its window (connect, round trips, answers)


def windows(budget: float, per_machine: int, link_waves: int) -> Windows:
    """Seconds per measurement. Just over half the budget goes to the host-by-host stage
    (every host of the busiest machine, ROUNDS times), a quarter to the links (wave after
    wave), the rest to the retests of suspects. Compute gets 70% of a host's turn, at least
    0.02 s and at most 0.15 s: a cgroup CPU quota is enforced per 0.1 s period, so a short
    window shows only a quota well below what the slots need (a 5% quota on 2 slots is 40x
    slower), a milder one needs a longer window (--deep-budget)."""
    turn = max(0.03, 0.55 * budget / max(1, per_machine * ROUNDS) - HOST_OVERHEAD)
    link = min(0.15, max(0.02, 0.25 * budget / max(1, link_waves) - LINK_OVERHEAD))
    return Windows(compute=min(0.15, max(0.02, 0.7 * turn)), memory=min(0.03, 0.15 * turn),
                   disk=min(0.03, 0.15 * turn), net=link)


def ring_links(n: int, pairs: int, seed: int = SEED) -> List[tuple]:
    """Directed links: each host to the next of the ring, then ``pairs`` more per host, drawn
    with ``seed``. One direction: a slow link is then measured again with a third host
    (:func:`retest_links`) to tell a slow sender from a slow receiver."""
    out: List[tuple] = [(i, (i + 1) % n) for i in range(n) if n > 1]
    rng = random.Random(seed)
    for i in range(n):
        others = [j for j in range(n) if j != i and (i, j) not in out]
        for j in rng.sample(others, min(pairs, len(others))):
            out.append((i, j))
    return out


def retest_links(slow: Sequence[tuple], n: int, good: Sequence[int]) -> List[tuple]:
    """For each slow link a->b: a->b again, a->c and c->b through a host c that is neither
    (the best-connected one): a slow a->c blames a's sending, a slow c->b b's receiving, and
    with two hosts only the reverse b->a is left to compare."""
    out: List[tuple] = []
    for a, b in slow:
        c = next((h for h in good if h not in (a, b)), None)
        extra = [(a, b), (a, c), (c, b)] if c is not None else [(a, b), (b, a)]
        out += [ln for ln in extra if ln not in out]
    return out


def link_waves(links: Sequence[tuple], machine: Sequence[str]) -> List[List[tuple]]:
    """Links grouped so that no machine carries two links of one wave (greedy, in order)."""
    waves: List[List[tuple]] = []
    busy: List[set] = []
    for ln in links:
        need = {machine[ln[0]], machine[ln[1]]}
        for wave, used in zip(waves, busy):
            if not need & used:
                wave.append(ln)
                used |= need
                break
        else:
            waves.append([ln])
            busy.append(set(need))
    return waves


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def combine(rounds: Sequence[outliers.Host]) -> outliers.Host:
    """One host's rounds -> its figures: the mean of each (per slot for compute)."""
    first = rounds[-1]
    rates = [r.compute for r in rounds if r.compute]
    compute = [sum(col) / len(col) for col in zip(*rates)] if rates else None
    disk = dict(next((r.disk for r in rounds if r.disk), {}))
    rate = _mean([(r.disk or {}).get("rate") for r in rounds])
    if rate is not None:
        disk["rate"] = rate
    return first._replace(compute=compute, memory=_mean([r.memory for r in rounds]), disk=disk)
