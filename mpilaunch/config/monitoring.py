"""``--sample-interval``: how often every rank's adapter samples its worker for the launcher
(mpilaunch/rank/monitor.py; docs/MONITOR.md). ``--monitor-interval`` is torchrun's agent's poll
period, accepted for torchrun command lines and ignored (config/options.py): no flag of
torchrun's is given another meaning here.

At least ``MIN_MONITOR_INTERVAL``: py-spy records 60% of each interval in whole seconds at 10
stack samples a second, and the straggler rule judges a wait share from 20 samples or more
(monitor/board.py); a 4 s interval records 2 s, 19-20 samples (py-spy's first comes after its
attach), which the rule would set aside round after round without a word.

On by default where its stack sampler can run: when ``py-spy`` is installed beside the ranks'
Python (``pip install 'mpilaunch[stall]'`` puts it there; the adapter looks there first, then on
its PATH). A launch whose Python has none gets no monitor unless asked: an asked-for monitor
without py-spy still samples CPU, memory and output, and rank 0 says in one line why it has no
stacks. ``--exec`` runs no adapter, so nothing there can sample: asked for, it is a usage error;
by default it is off.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mpilaunch import contract
from mpilaunch.config.options import DEFAULT_MONITOR_INTERVAL, MIN_MONITOR_INTERVAL
from mpilaunch.errors import UsageError

if TYPE_CHECKING:   # what interval() reads of launchconfig.LaunchConfig (which imports this)
    from typing import Protocol

    class LaunchConfig(Protocol):
        @property
        def exec_mode(self) -> bool: ...
        @property
        def python(self) -> str: ...


def py_spy_beside(python: str) -> bool:
    """``py-spy`` is an executable in the directory of the ranks' interpreter ``python``."""
    path = os.path.join(os.path.dirname(python), "py-spy")
    return os.path.isfile(path) and os.access(path, os.X_OK)


def interval(given: object, cfg: LaunchConfig) -> float:
    """The adapters' sample interval in seconds (0: off) from the flag's value (None: not
    given) and the launch (its ``exec_mode`` and ``python``)."""
    if given is None:
        if cfg.exec_mode or not py_spy_beside(cfg.python):
            return 0.0
        return DEFAULT_MONITOR_INTERVAL
    value = contract.seconds(given, "--sample-interval", allow_zero=True)
    if value and value < MIN_MONITOR_INTERVAL:
        raise UsageError(f"--sample-interval={given}: under {MIN_MONITOR_INTERVAL:g} s a round "
                         "holds fewer than the 20 stack samples the straggler rule judges; give "
                         f"{MIN_MONITOR_INTERVAL:g} or more, or 0 for off")
    if value and cfg.exec_mode:
        raise UsageError(f"--sample-interval={given}: --exec runs no rank adapter to sample "
                         "the worker; drop --exec, or give --sample-interval 0")
    return value
