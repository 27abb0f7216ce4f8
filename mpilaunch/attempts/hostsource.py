"""Where each attempt's hosts come from, behind one face (:class:`HostSource`), so that the
loop of attempts (attempts.py) never asks which it holds:

- :class:`FixedHosts`: the launch config's (hostfile, ``-H``, an allocation). Before a
  relaunch the hosts the failure involved are checked again (health.py); a lost one, or one
  that fails, is dropped with ``--min-hosts`` (shrink.py), else the job ends (exit 255).
- :class:`DiscoveredHosts`: ``--host-discovery-script`` (discovery.py) gives each attempt's
  hosts, less those cooling down or failing their preflight; none left ends the job with the
  last attempt's status.

Both keep the hosts' failures across attempts in one :class:`health.HostHealth`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Tuple

from mpilaunch.attempts.nextattempt import Between

if TYPE_CHECKING:   # annotations only: a plain launch imports neither (its first attempt checks nothing)
    from mpilaunch.attempts import discovery, health


class NextHosts(NamedTuple):
    """The next attempt's config (its hosts, world size, and in its resilience settings whether
    rank 0 runs here); ``note``: what the last attempt's line of the summary adds; ``dropped``: the
    hosts left out for good (``--min-hosts``), said once the relaunch is announced."""

    cfg: Any
    note: str = ""
    dropped: Tuple[str, ...] = ()


class HostsEnded(Exception):
    """No relaunch: the next attempt's hosts are not there (said already). ``status``: the
    job's exit status, None for the last attempt's; ``note``: the line the attempts' summary
    gives the reason ('' for none)."""

    def __init__(self, status: Optional[int], note: str = "") -> None:
        super().__init__(note)
        self.status, self.note = status, note


class HostSource:
    """What the loop asks of a source of hosts."""

    health: health.HostHealth

    def next(self, step: Between) -> NextHosts:
        """Attempt ``step.k``'s hosts, or raise :class:`HostsEnded`."""
        raise NotImplementedError


class FixedHosts(HostSource):
    """The hosts' checks (health.py) and the shrink are imported by the first relaunch: a
    launch that ends with its first attempt never loads them."""

    def __init__(self, check: Optional[Callable[..., Any]] = None) -> None:
        self.check = check      # the hosts' checks: None for health.preflight (a stand-in in unit tests)
        self._health: Optional[health.HostHealth] = None

    @property
    def health(self) -> health.HostHealth:   # type: ignore[override]  # made when first asked
        from mpilaunch.attempts import health

        if self._health is None:
            self._health = health.HostHealth()
        return self._health

    def next(self, step: Between) -> NextHosts:
        from mpilaunch.attempts import health, shrink

        try:
            checked = health.before_relaunch(self.health, step, health.say, self.check or health.preflight)
        except health.Ended as end:
            health.say(str(end))
            raise HostsEnded(end.status, f"{end}: exit status {end.status}") from None
        smaller = checked or shrink.shrink(step)
        if smaller is None:
            return NextHosts(step.cfg)
        cfg, dropped = smaller
        return NextHosts(cfg, dropped=tuple(dropped))


class DiscoveredHosts(HostSource):
    def __init__(self, disc: discovery.Discovery) -> None:
        self.disc = disc
        self.health = disc.health

    def next(self, step: Between) -> NextHosts:
        from mpilaunch.attempts import discovery

        found = discovery.between(self.disc, step)
        if found is None:    # no host left: the job ends with the last attempt's status
            raise HostsEnded(None)
        cfg, note = found
        return NextHosts(cfg, note=note)


def source(disc: Optional[discovery.Discovery]) -> HostSource:
    """The source for a launch: ``disc`` from ``discovery.setup`` (None: no script)."""
    return FixedHosts() if disc is None else DiscoveredHosts(disc)
