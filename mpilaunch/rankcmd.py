"""The rank command: how every rank starts the adapter, and the adapter flags the launcher
writes (docs/ARCHITECTURE.md, "The rank command")."""
from __future__ import annotations

import os
import sys
from typing import List, Optional


BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank", "_boot.py")


def rank_interpreter(python: str, launcher_python: str) -> List[str]:
    """How each rank starts the adapter. With our own interpreter: ``python -S _boot.py``
    (no ``site``/``.pth`` processing: measured 57 ms -> 10 ms of start-up per rank); with
    another interpreter (``--python``), whose packages we do not know: ``python -m``."""
    if os.path.abspath(python) == os.path.abspath(launcher_python):  # not realpath: a venv's python links to its base
        return [python, "-S", BOOT]
    return [python, "-m", "mpilaunch.rank"]


def rank_command(cfg, launcher_python: str = sys.executable) -> List[str]:
    cmd = rank_interpreter(cfg.python, launcher_python)
    if cfg.exec_mode:
        cmd.append("--exec")
    cmd += ["--log-dir", cfg.log_dir]
    if cfg.worker_log_name:
        cmd += ["--worker-log-name", cfg.worker_log_name]
    cmd += ["--tail-worker-log", cfg.tail_worker_log]
    if cfg.master_addr:
        cmd += ["--master-addr", cfg.master_addr]
    cmd += ["--master-port", str(cfg.master_port)]
    if cfg.cluster_time_out is not None:
        cmd += ["--cluster-time-out", str(cfg.cluster_time_out)]
    if cfg.bind_core:
        cmd += ["--bind-core", cfg.bind_core]
    if cfg.visible_devices:
        cmd += ["--visible-devices", cfg.visible_devices]
    if not cfg.scheduler:
        cmd.append("--no-scheduler")
    if not cfg.port_check:
        cmd.append("--no-port-check")
    if cfg.no_python:
        cmd.append("--no-python")
    else:
        cmd += ["--python", cfg.python]
    cmd += list(cfg.rank_extra)   # restart count, grace, watchdog, span check (restart.py)
    if cfg.module:
        # a flag of its own: "-m" as SCRIPT would be a file named -m in every rank's cwd
        cmd += ["--module", "--", cfg.module]
    else:
        cmd.append("--")
        cmd.append(os.path.abspath(cfg.script) if not cfg.no_python else cfg.script)
    cmd.extend(cfg.script_args)
    return cmd


def attempt_flags(restart_count: Optional[int], max_restarts: int, term_grace: Optional[float],
                  stall_timeout: Optional[float], expect_ranks: Optional[str]) -> List[str]:
    """The adapter flags of one attempt of a long job (restart count, graceful stop, stall
    watchdog, span check); ``restart_count`` None: no restarts asked."""
    extra: List[str] = []
    if restart_count is not None:
        extra += ["--restart-count", str(restart_count), "--max-restarts", str(max_restarts)]
    if term_grace is not None:
        extra += ["--term-grace", f"{term_grace:g}"]
    if stall_timeout:
        extra += ["--stall-timeout", f"{stall_timeout:g}"]
    if expect_ranks:
        extra += ["--expect-ranks", expect_ranks]
    return extra
