"""The shapes output/events.py reads of the launch's config, plan, backend, preflight results
and attempt, for the checker (Protocols: the records themselves live in config/, backends/,
check/ and supervise/, layers above output/ that it may not import). Imported under
TYPE_CHECKING only: a launch never loads this module."""
from __future__ import annotations

from typing import Optional, Protocol, Sequence, TypeVar

from mpilaunch.output.outcome import Failure   # noqa: F401 (events.py takes it from here too)


class Host(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def slots(self) -> int: ...


class Config(Protocol):   # config/launchconfig.py's LaunchConfig
    @property
    def worker_log_name(self) -> Optional[str]: ...
    @property
    def hosts_source(self) -> str: ...
    @property
    def np(self) -> int: ...
    @property
    def hosts(self) -> Sequence[Host]: ...


class Resilience(Protocol):   # config/resilience.py's Resilience
    @property
    def log_dir(self) -> str: ...
    @property
    def max_restarts(self) -> int: ...


class Backend(Protocol):   # backends/base.py's Backend
    @property
    def program(self) -> str: ...


class Plan(Protocol):   # backends/base.py's Plan
    @property
    def log_dirs(self) -> Sequence[str]: ...
    @property
    def np(self) -> int: ...
    @property
    def hosts(self) -> Sequence[Host]: ...


class CheckResult(Protocol):   # check/results.py's Result
    @property
    def host(self) -> Optional[str]: ...
    @property
    def check(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def seconds(self) -> float: ...
    @property
    def message(self) -> str: ...


class Attempt(Protocol):   # supervise/attempt.py's Attempt, after finish
    @property
    def status(self) -> Optional[int]: ...
    @property
    def cause(self) -> str: ...
    @property
    def stopped_by(self) -> Optional[int]: ...
    @property
    def failures(self) -> Sequence[Failure]: ...


Result = TypeVar("Result", bound=CheckResult)   # events.preflight gives back what it is given
