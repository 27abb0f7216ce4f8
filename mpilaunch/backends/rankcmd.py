"""The rank command: how every rank starts the adapter, and the adapter flags the launcher
writes, rendered from the one table of them, mpilaunch/rank/flags.py (docs/ARCHITECTURE.md,
"The rank command", is generated from the same table)."""
from __future__ import annotations

import os
import sys
from typing import Callable, List, Optional

from mpilaunch.rank import flags

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig


BOOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rank", "_boot.py")


def rank_interpreter(python: str, launcher_python: str) -> List[str]:
    """How each rank starts the adapter. With our own interpreter: ``python -S _boot.py``
    (no ``site``/``.pth`` processing: docs/ARCHITECTURE.md, start-up); with
    another interpreter (``--python``), whose packages we do not know: ``python -m``."""
    if os.path.abspath(python) == os.path.abspath(launcher_python):  # not realpath: a venv's python links to its base
        return [python, "-S", BOOT]
    return [python, "-m", "mpilaunch.rank"]


def _rendered(flag: flags.Flag, value: object) -> List[str]:
    """``flag`` with ``value`` as the adapter reads it (the table's kind says how)."""
    if flag.kind == flags.SWITCH:
        return [flag.name]
    if flag.kind == flags.SECONDS:
        return [flag.name, f"{value:g}"]
    return [flag.name, str(value)]


def _is_written(flag: flags.Flag, get: Callable[[str], object]) -> bool:
    test, field = flags.condition(flag)
    value = get(field)
    if test == flags.ALWAYS:
        return True
    if test == flags.GIVEN:
        return value is not None
    if test == flags.OFF:
        return not value
    return bool(value)      # SET, ON


def write_flags(writer: str, get: Callable[[str], object]) -> List[str]:
    """The flags of the table's rows written by ``writer``, in the table's order; ``get``
    gives the value of a row's ``source`` (and of the field its ``when`` tests)."""
    out: List[str] = []
    for flag in flags.FLAGS:
        if flag.writer == writer and _is_written(flag, get):
            out += _rendered(flag, get(flag.source))
    return out


def rank_command(cfg: LaunchConfig, launcher_python: str = sys.executable) -> List[str]:
    """The rank command: interpreter, the config's adapter flags with the attempt's
    (``cfg.rank_extra``, written by :func:`attempt_flags`) where the table puts them, then
    ``-- SCRIPT ARGS``."""
    cmd = rank_interpreter(cfg.python, launcher_python)
    extra_done = False
    get = cfg.__getattribute__
    for flag in flags.FLAGS:
        if flag.writer == flags.ATTEMPT and not extra_done:
            cmd += list(cfg.rank_extra)
            extra_done = True
        elif flag.writer == flags.CONFIG and _is_written(flag, get):
            cmd += _rendered(flag, get(flag.source))
    cmd.append("--")
    if cfg.module:
        # --module, not "-m" as SCRIPT: that would be a file named -m in every rank's cwd
        cmd.append(cfg.module)
    elif cfg.script is not None:    # launchconfig.build gives a script or a module
        cmd.append(os.path.abspath(cfg.script) if not cfg.no_python else cfg.script)
    cmd.extend(cfg.script_args)
    return cmd


def attempt_flags(restart_count: Optional[int], max_restarts: int, term_grace: Optional[float],
                  stall_timeout: Optional[float], expect_ranks: Optional[str],
                  in_place: Optional[int] = None, in_place_no_progress: Optional[int] = None
                  ) -> List[str]:
    """The adapter flags of one attempt of a long job (restart count, graceful stop, stall
    watchdog, span check, the in-place coordinator's port); ``restart_count`` None: no
    restarts asked."""
    values = {"restart_count": restart_count, "max_restarts": max_restarts,
              "term_grace": term_grace, "stall_timeout": stall_timeout,
              "expect_ranks": expect_ranks, "in_place": in_place,
              "in_place_no_progress": in_place_no_progress}
    return write_flags(flags.ATTEMPT, values.__getitem__)
