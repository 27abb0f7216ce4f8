"""The pre-launch checks' settings: ``--preflight`` (ssh or deep) and the ``--deep-*`` options
of ``mpilaunch check --deep`` (which ``--preflight deep`` runs with the same values), checked
where the configuration is built."""
from typing import Mapping, NamedTuple, Optional

from mpilaunch import contract
from mpilaunch.config import options
from mpilaunch.errors import UsageError

LEVELS = ("ssh", "deep")


class DeepSettings(NamedTuple):
    """``mpilaunch check --deep``'s settings."""

    budget: float                   # seconds
    threshold: float                # times the median
    min_free: float                 # bytes free
    pairs: int                      # links per host besides the ring
    collective: Optional[str]       # None, gloo or nccl


def _number(value: object, source: str, least: float, what: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = None
    if number is None or number != number or number in (float("inf"), float("-inf")):
        raise UsageError(f"{source}={value!r}: not a number; give {what}")
    if number < least:
        raise UsageError(f"{source}={value!r}: out of range; give {what}")
    return number


def deep_settings(args: object, env: Mapping[str, str]) -> DeepSettings:
    """The --deep options (defaults: the option table's), each checked in one line."""
    budget = contract.seconds(*options.setting(args, env, "deep_budget"))
    threshold = _number(*options.setting(args, env, "deep_threshold"), 1.1,
                        "a factor of at least 1.1 (times slower than the median)")
    min_free = _number(*options.setting(args, env, "deep_min_free"), 0.0,
                       "a number of GB, 0 or more") * 1e9
    pairs = contract.whole(*options.setting(args, env, "deep_pairs"), 0)
    collective, source = options.setting(args, env, "deep_collective")
    if collective is not None and collective not in ("gloo", "nccl"):
        raise UsageError(f"{source}={collective!r}: give gloo or nccl")
    return DeepSettings(budget, threshold, min_free, pairs, collective)


def preflight_level(args: object, env: Mapping[str, str]) -> str:
    """``--preflight``: ``ssh`` (resolve, port, login) or ``deep`` (``check --deep``)."""
    value, source = options.setting(args, env, "preflight")
    if value not in LEVELS:
        raise UsageError(f"{source}={value!r}: give ssh or deep")
    return value
