"""The health of the job's hosts across its attempts: one record (:class:`HostHealth`) for host
discovery (discovery.py) and for the check before a relaunch (:func:`before_relaunch`).

The rule, the same for both:

- A host that failed :data:`FAILS_TO_COOL` times (lost by the starter, or failed its check)
  sits out :data:`COOL_DOWN` seconds. Two, not one: a single loss is often a flap (a link or
  ssh connection cut once), and a host still down fails its check before it is used anyway. A
  second failure means the host passes the checks and still kills attempts: then it costs
  every further attempt.
- Before a relaunch after a failure that involved a host (a host lost, a daemon or adapter
  dead, a rank killed by a signal), the hosts involved get the launch's checks again (the ssh
  checks of mpilaunch/check/; ``check --deep`` too when the launch used ``--preflight
  deep``), instead of spending the next attempt on a host that cannot run it. A host that
  fails, or sits out, is dropped with ``--min-hosts`` (while at least that many are left);
  otherwise the job ends at once, exit 255 (a host failed, as for a lost host), one line
  naming the host and why. A rank that failed with an exit code, a worker's own error, leaves
  its host unchecked: the script, not the host, is the suspect.
- Hosts on this machine need no ssh: a local-only job is never checked; nor are the hosts of
  a Slurm allocation (mpirun starts its daemons through Slurm there, as at the start).
"""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from mpilaunch import net
from mpilaunch.config import allocation, resilience
from mpilaunch.config import hostfile as hf
from mpilaunch.attempts import shrink
from mpilaunch.output import events
from mpilaunch.output.outcome import LOST_HOST_STATUS

if TYPE_CHECKING:
    from mpilaunch.attempts.nextattempt import Between

FAILS_TO_COOL = 2       # failures of a host before it sits out (see the module's text)
COOL_DOWN = 300.0       # seconds a host that failed FAILS_TO_COOL times is left out


class HostHealth:
    """Failures counted per host (its label: one address may hold one host per ssh port) and
    the hosts sitting out, until when (``clock``'s time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.fails: Dict[str, int] = {}
        self.cooled: Dict[str, float] = {}     # host -> when it may be used again

    def charge(self, failed: Sequence[str], warn: Callable[[str], None]) -> List[str]:
        """Count a failure against each host; the FAILS_TO_COOL-th sends it to cool down
        (said through ``warn``) -> the hosts sent to cool down now."""
        sent = []
        for name in failed:
            self.fails[name] = self.fails.get(name, 0) + 1
            if self.fails[name] >= FAILS_TO_COOL:
                self.fails[name] = 0
                self.cooled[name] = self.clock() + COOL_DOWN
                sent.append(name)
                warn(f"host {name} failed {FAILS_TO_COOL} times: left out for {COOL_DOWN:g} s")
        return sent

    def cooling(self) -> Dict[str, float]:
        """The hosts sitting out now -> the seconds they have left (those whose time is up
        are forgotten)."""
        now = self.clock()
        for name, until in list(self.cooled.items()):
            if until <= now:
                del self.cooled[name]
        return {name: until - now for name, until in self.cooled.items()}

    def why_out(self, name: str) -> Optional[str]:
        left = self.cooling().get(name)
        return None if left is None else (f"failed {FAILS_TO_COOL} times, cooling down "
                                          f"({left:.0f} s left)")


# ---------------------------------------------------------------- the checks

def preflight(cfg: Any, hosts: Sequence[hf.Host]) -> Dict[str, str]:
    """The launch's ssh checks (resolve, ssh port, login) on ``hosts`` -> failing host -> why;
    with ``--preflight deep`` (``cfg.preflight``) ``check --deep``'s too."""
    from mpilaunch import check

    remote = [h for h in hosts if not net.is_here(h)]
    if not remote:
        return {}
    probe = cfg._replace(hosts=tuple(remote), np=sum(h.slots for h in remote))
    bad: Dict[str, str] = {}
    for r in check.failed(check.run_checks(probe, timeout=check.DEFAULT_TIMEOUT)):
        if r.host:
            bad.setdefault(r.host, f"{r.check}: {r.message}")
    if getattr(cfg, "preflight", None) == "deep" and len(bad) < len(remote):
        bad.update({h: why for h, why in _deep(cfg, remote).items() if h not in bad})
    return bad


def _deep(cfg: Any, hosts: Sequence[hf.Host]) -> Dict[str, str]:
    """``check --deep`` with the launch's settings on ``hosts`` -> failing host -> why."""
    from types import SimpleNamespace

    from mpilaunch.check import deep
    from mpilaunch.check.results import (DEFAULT_PARALLEL, DEFAULT_TIMEOUT, LEVEL_FULL, failed,
                                         params_from_config)
    from mpilaunch.config import mpi
    from mpilaunch.config import preflight as pf

    probe = cfg._replace(hosts=tuple(hosts), np=sum(h.slots for h in hosts))
    p = params_from_config(probe, level=LEVEL_FULL, mpi_info=mpi.detect(cfg.mpirun, os.environ),
                           check_script=True)
    settings = cfg.deep or pf.deep_settings(SimpleNamespace(), os.environ)
    results, _ = deep.check_deep(p, settings, cfg.log_dir, DEFAULT_TIMEOUT, DEFAULT_PARALLEL)
    bad: Dict[str, str] = {}
    for r in failed(results):
        if r.host:
            bad.setdefault(r.host, f"deep {r.check}: {r.message}")
    return bad


# ---------------------------------------------------------------- before a relaunch

class Ended(Exception):
    """No relaunch: a host the next attempt needs failed its check; str(): the one line."""

    status = LOST_HOST_STATUS


def involved(cfg: Any, att: Any) -> List[int]:
    """The indices in ``cfg.hosts`` of the hosts the failure of ``att`` (an AttemptRecord)
    involved: those it lost (a dead daemon is a lost host too) and those of its ranks killed
    by a signal or whose adapter died (the plan's slots in order); [] when a lost host
    matches none."""
    found = set(shrink.lost_indices(cfg, att) or ())
    for rank in att.signalled:
        i = shrink.host_of_rank(cfg, rank)
        if i is not None:
            found.add(i)
    return sorted(found)


def before_relaunch(health: HostHealth, step: "Between", warn: Callable[[str], None],
                    check: Callable[[Any, List[hf.Host]], Dict[str, str]] = preflight
                    ) -> Optional[Tuple[Any, Dict[str, str]]]:
    """Before attempt ``step.k`` (a relaunch onto the config's own hosts): the hosts the last
    attempt's failure involved are checked (``check(cfg, hosts)`` -> failing host -> why); the
    lost ones and the failing ones are charged to ``health``. -> None (nothing to change: the
    next attempt runs as it would have), or (cfg, {dropped host: why}) for the hosts left
    (``--min-hosts``), or raises :class:`Ended`."""
    cfg, att, k, lr = step.cfg, step.last, step.k, resilience.of(step.cfg)
    hosts = tuple(cfg.hosts)
    # inside a Slurm allocation daemons start through Slurm, not ssh: no ssh check (run.py)
    if net.all_here(hosts) or allocation.from_slurm(getattr(cfg, "hosts_from", "")):
        return None
    lost = set(shrink.lost_indices(cfg, att) or ())
    idx = involved(cfg, att)
    health.charge([hf.label(hosts[i]) for i in sorted(lost)], warn)
    out: Dict[int, str] = {}
    for i, h in enumerate(hosts):     # a host sitting out (involved now or not)
        why = health.why_out(hf.label(h))
        if why:
            out[i] = why
    # a lost host that the shrink drops whatever its check says (--min-hosts, enough hosts
    # left) is not checked: the check of a host known gone only waits out its ssh time-out
    # (10.5 s of a lost host's 38 s on namespace hosts: docs/PERFORMANCE.md, restart)
    drops = lr.min_hosts is not None and len(hosts) - len(lost) >= lr.min_hosts
    checked = [i for i in idx if i not in out and not net.is_here(hosts[i])
               and not (drops and i in lost)]
    if checked:
        bad = check(cfg, [hosts[i] for i in checked])
        failing = [i for i in checked if hf.label(hosts[i]) in bad or hosts[i].name in bad]
        for i in failing:
            out[i] = bad.get(hf.label(hosts[i])) or bad[hosts[i].name]
        sent = health.charge([hf.label(hosts[i]) for i in failing], warn)
        for i in failing:
            if hf.label(hosts[i]) in sent:
                out[i] += f"; failed {FAILS_TO_COOL} times: left out for {COOL_DOWN:g} s"
    record = {hf.label(hosts[i]): why for i, why in sorted(out.items())}
    gone = set(out) | (lost if lr.min_hosts is not None else set())
    left = tuple(h for i, h in enumerate(hosts) if i not in gone)
    ended = bool(out) and (lr.min_hosts is None or len(left) < lr.min_hosts or not left)
    if checked or out:
        events.emit(events.Kind.HOST_CHECK, next_attempt=k, checked=[hf.label(hosts[i]) for i in checked],
                    level="deep" if getattr(cfg, "preflight", None) == "deep" else "ssh",
                    failed=record, ended=ended)
    if not out:
        return None
    if ended:
        i = min(out)
        more = f" (and {len(out) - 1} more: {', '.join(record)})" if len(out) > 1 else ""
        need = ("give --min-hosts to go on without it" if lr.min_hosts is None else
                f"{len(left)} host(s) would be left, fewer than --min-hosts {lr.min_hosts}")
        raise Ended(f"host {hf.label(hosts[i])} failed its check before attempt {k}: {out[i]}"
                    f"{more}; not restarting onto it ({need})")
    for name, why in record.items():
        warn(f"host {name} failed its check before attempt {k}: {why}")
    slots = sum(h.slots for h in left)
    np = slots if cfg.np >= sum(h.slots for h in hosts) else min(cfg.np, slots)
    dropped = {hf.label(hosts[i]): out.get(i, "lost") for i in sorted(gone)}
    return cfg._replace(hosts=left, np=np, master_addr=step.master_addr,
                        resilience=lr._replace(rank0_here=net.rank0_is_here(left))), dropped


def say(text: str) -> None:
    """What the check before a relaunch says on stderr, one line each."""
    print(f"mpilaunch: {text}", file=sys.stderr, flush=True)
