"""Host discovery, ``--host-discovery-script PATH``: before every attempt (the first too) an
executable of the user's prints the live hosts, one ``host:slots`` line each (``host`` alone:
1 slot). That is Horovod's ``--host-discovery-script`` contract and what the Kubeflow
mpi-operator writes to ``/etc/mpi/discover_hosts.sh``. Its hosts and slots replace the
hostfile's for that attempt; the world size is their slots (or the user's ``-np`` when they
hold it), ranks, ``LOCAL_*`` and rank 0's address follow from the new plan, as with
``--min-hosts``.

Rules between attempts (:class:`Discovery`):

- A host that failed :data:`FAILS_TO_COOL` times (lost by the starter, or failed its preflight)
  is left out for :data:`COOL_DOWN` seconds even while the script lists it: the rule of
  health.py (:class:`health.HostHealth`), the same as before a relaunch without discovery.
  The script is the orchestrator's view of what is alive, and a single loss is often a flap; a
  host the script still lists after one loss is preflighted again before it is used, so a
  host still down is left out of that attempt anyway.
- A host not used by an earlier attempt, or lost in the last one, is preflighted (the ssh
  checks of mpilaunch/check/) before it is used; one that fails is left out of that attempt
  and named on stderr. The first attempt's hosts get the launch's own start checks, as hosts
  of a hostfile do.
- A script that fails, times out or prints a line that is not ``host[:slots]``: before the
  first attempt a one-line usage error (exit 2); before a later one the previous attempt's
  hosts are kept, with a warning that says why.
- No host left, or fewer than ``--min-hosts``: no further attempt; the job ends with the
  last attempt's status.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Set,
                    Tuple)

from mpilaunch import net
from mpilaunch.config import hostfile as hf
from mpilaunch.config import options, resilience
from mpilaunch.config.resilience import DISCOVERY_FLAG
from mpilaunch.errors import UsageError
from mpilaunch.attempts import health, shrink
from mpilaunch.attempts.health import COOL_DOWN, FAILS_TO_COOL  # noqa: F401 (the rule's numbers)
from mpilaunch.output import events
from mpilaunch.output.summary import signal_name
from mpilaunch.ssh import last_line

if TYPE_CHECKING:
    from mpilaunch.attempts.nextattempt import Between

FLAG = DISCOVERY_FLAG
TIMEOUT = 30.0          # seconds the script may take (a kubectl or API call, not a scan)
STDERR_KEPT = 200       # characters of the script's last stderr line kept for the message


class DiscoveryError(Exception):
    """The script failed, timed out or printed a malformed line; str(): what, one line."""


def parse(text: str, script: str) -> Tuple[hf.Host, ...]:
    """The script's output -> its hosts, in order. Blank lines are skipped; any other line
    that is not ``host`` or ``host:slots`` (slots a whole number from 1), or a host listed
    twice, raises DiscoveryError naming the line."""
    hosts: List[hf.Host] = []
    seen = set()
    for n, line in enumerate(text.splitlines(), 1):
        item = line.strip()
        if not item:
            continue
        try:   # hostfile.split_item: host, host:slots, host:slots@port ([v6]:slots@port)
            name, count, port = hf.split_item(item, "line") if " " not in item else (None, 0, 0)
        except UsageError:
            name, count = None, 0
        if name is None:
            raise DiscoveryError(f"{script} printed line {n} {item!r}: give host or host:slots "
                                 f"(slots a whole number from 1 to {hf.MAX_SLOTS})")
        host = hf.Host(name, count or 1, None, port)
        if (name.lower(), port) in seen:
            raise DiscoveryError(f"{script} printed line {n} {item!r}: host {hf.label(host)} "
                                 "listed twice")
        seen.add((name.lower(), port))
        hosts.append(host)
    return tuple(hosts)


def run_script(script: str, timeout: float = TIMEOUT) -> str:
    """Run the script (argv ``[script]``, no shell, stdin closed, in its own process group so
    that a timeout ends what it started too, as long as it holds the script's output open)
    -> its stdout, or DiscoveryError. After a normal end nothing is signalled: the group's id
    may be reused once its last process is gone."""
    try:
        proc = subprocess.Popen([script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise DiscoveryError(f"{script} could not be run: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise DiscoveryError(f"{script} timed out after {timeout:g} s") from None
    except BaseException:
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        why = (f"ended by {signal_name(-proc.returncode)}" if proc.returncode < 0
               else f"exited with status {proc.returncode}")
        last = last_line(err.decode("utf-8", "replace"))[:STDERR_KEPT]
        raise DiscoveryError(f"{script} {why}" + (f": {last}" if last else ""))
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise DiscoveryError(f"{script} printed bytes that are not UTF-8") from None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        pass


def discover(script: str, timeout: float = TIMEOUT) -> Tuple[hf.Host, ...]:
    return parse(run_script(script, timeout), script)


def world_size(hosts: Sequence[hf.Host], user_np: Optional[int]) -> int:
    """The slots of ``hosts``, or the user's ``-np`` when they hold it."""
    slots = sum(h.slots for h in hosts)
    return user_np if user_np is not None and user_np <= slots else slots


def names(hosts: Sequence[hf.Host]) -> str:
    return ", ".join(h.name for h in hosts)


class Discovery:
    """The script and what the launcher learnt about hosts across the attempts of one job.
    ``user_np``: the user's ``-np`` (None: the slots). ``clock``/``runner``/``preflight``:
    what time it is, how the script is run, and which hosts fail the preflight (stand-ins in
    the unit tests; the real ones below)."""

    def __init__(self, script: str, user_np: Optional[int], timeout: float = TIMEOUT,
                 clock: Callable[[], float] = time.monotonic,
                 runner: Optional[Callable[[], Any]] = None,
                 preflight: Optional[Callable[..., Any]] = None) -> None:
        self.script, self.user_np, self.timeout = script, user_np, timeout
        self.clock = clock
        self.runner = runner or (lambda: discover(self.script, self.timeout))
        self.preflight = preflight or health.preflight
        self.health = health.HostHealth(clock)   # failures and cool-downs (health.py)
        self.seen: Set[str] = set()            # hosts an attempt ran on
        self.last_checked: List[str] = []      # the hosts the last next_hosts preflighted

    # ---------------------------------------------------------------- the first attempt
    def first(self, cfg: Any) -> Any:
        """Before attempt 0: the script's hosts replace the config's, or one usage line."""
        try:
            hosts = self.runner()
        except DiscoveryError as exc:
            raise UsageError(f"{FLAG}: {exc}") from None
        if not hosts:
            raise UsageError(f"{FLAG}: {self.script} listed no host")
        self.seen.update(hf.label(h) for h in hosts)
        return cfg._replace(hosts=hosts, np=world_size(hosts, self.user_np),
                            hosts_source=f"{FLAG} {self.script}")

    # ---------------------------------------------------------------- later attempts
    @property
    def fails(self) -> Dict[str, int]:
        return self.health.fails

    @property
    def cooled(self) -> Dict[str, float]:
        return self.health.cooled

    def charge(self, failed: Sequence[str], warn: Callable[[str], None]) -> None:
        """Count a failure against each host; the FAILS_TO_COOL-th sends it to cool down."""
        self.health.charge(failed, warn)

    def next_hosts(self, k: int, previous: Tuple[hf.Host, ...], lost: Sequence[str],
                   cfg: Any, warn: Callable[[str], None]) -> Tuple[Tuple[hf.Host, ...], Dict[str, str]]:
        """The hosts of attempt ``k`` (``previous``: attempt k-1's, ``lost``: the names of
        those it lost) -> (hosts, left out: name -> why)."""
        self.charge(lost, warn)
        try:
            listed = self.runner()
        except DiscoveryError as exc:
            warn(f"{exc}; attempt {k} keeps the hosts of attempt {k - 1}")
            listed = previous
        cooling = self.health.cooling()
        out: Dict[str, str] = {}
        hosts = []
        for h in listed:   # a host is its label: one address may be listed once per ssh port
            if hf.label(h) in cooling:
                out[hf.label(h)] = f"cooling down ({cooling[hf.label(h)]:.0f} s left)"
            else:
                hosts.append(h)
        fresh = [h for h in hosts if hf.label(h) not in self.seen or hf.label(h) in lost]
        self.last_checked = [hf.label(h) for h in fresh]
        if fresh:
            bad = self.preflight(cfg, fresh)
            for name, why in bad.items():
                out[name] = f"preflight: {why}"
                warn(f"host {name} left out of attempt {k}: preflight: {why}")
            self.charge(list(bad), warn)
            hosts = [h for h in hosts if hf.label(h) not in bad]
        self.seen.update(hf.label(h) for h in hosts)
        return tuple(hosts), out


def setup(args: Any, cfg: Any, env: Mapping[str, str]) -> Tuple[Optional[Discovery], Any]:
    """``--host-discovery-script`` (``cfg.resilience.discovery_script``): -> (Discovery, the
    config of attempt 0, its hosts the script's first list), or (None, cfg)."""
    lr = cfg.resilience
    if lr is None or lr.discovery_script is None:
        return None, cfg
    np_raw, _ = options.setting(args, env, "np")
    disc = Discovery(lr.discovery_script, cfg.np if np_raw is not None else None)
    first = disc.first(cfg)
    return disc, first._replace(resilience=resilience.for_hosts(lr, first.hosts, first.hosts_source))


def between(disc: Discovery, step: "Between") -> Optional[Tuple[Any, str]]:
    """Before attempt ``step.k`` (k > 0): -> (cfg, note) of that attempt, or None: no host
    left (or fewer than ``--min-hosts``), the job ends. Says on stderr, in the note (for the
    last attempt's line of the summary) and in the event record which hosts the attempt runs
    on when they changed."""
    cfg, att, k = step.cfg, step.last, step.k
    lr = resilience.of(cfg)

    def warn(text: str) -> None:
        print(f"mpilaunch: host discovery: {text}", file=sys.stderr, flush=True)

    previous = tuple(cfg.hosts)
    lost = [hf.label(previous[i]) for i in sorted(shrink.lost_indices(cfg, att) or ())]
    hosts, out = disc.next_hosts(k, previous, lost, cfg, warn)
    need = lr.min_hosts or 1
    if len(hosts) < need:
        why = ("no host left" if not hosts else
               f"{len(hosts)} host(s) left, fewer than --min-hosts {lr.min_hosts}")
        warn(f"{why} for attempt {k}: the job ends with attempt {k - 1}'s status")
        events.emit(events.Kind.DISCOVERY, next_attempt=k, hosts=[h.name for h in hosts], left_out=out,
                    ended=True)
        return None
    np = world_size(hosts, disc.user_np)
    note = ""
    if hosts != previous or np != cfg.np:
        note = (f"; host discovery: attempt {k} on {names(hosts)} (was {names(previous)}), "
                f"world size {np}")
        warn(f"attempt {k} runs on {names(hosts)}, world size {np}")
    events.emit(events.Kind.DISCOVERY, next_attempt=k, hosts=[{"name": h.name, "slots": h.slots}
                                                    for h in hosts], np=np, left_out=out,
                preflighted=disc.last_checked)
    return cfg._replace(hosts=hosts, np=np, master_addr=step.master_addr,
                        resilience=lr._replace(rank0_here=net.rank0_is_here(hosts))), note
