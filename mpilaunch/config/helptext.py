"""What ``--version`` and the end of ``--help`` say (options.py puts them in every parser), and
the help's formatter."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from mpilaunch import __version__
from mpilaunch.output import outcome


def version_text() -> str:
    """``--version``'s answer (also the first line of ``--dry-run``)."""
    # sys.version's first word is platform.python_version(), without importing platform
    # (every launch builds this for its parser)
    return (f"mpilaunch {__version__} (Python {sys.version.split()[0]}, "
            f"{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})")


def _launch_statuses() -> str:
    return ("exit status:\n"
            "  0        success\n"
            "  1        a preflight check failed (nothing started)\n"
            "  2        a usage error (nothing started), or a rank's adapter refused a value\n"
            f"  {outcome.STALL_STATUS}      the stall watchdog ended the job (--stall-timeout)\n"
            "  128+N    mpilaunch was asked to stop by signal N (130: Ctrl-C, 143: SIGTERM), or\n"
            "           the failing rank was killed by signal N\n"
            f"  {outcome.LOST_HOST_STATUS}      a host was lost (with --max_restarts: or failed its check before a\n"
            "           restart)\n"
            "  other    the failing rank's exit code (the root cause the summary names)\n"
            "with --max_restarts: the last attempt's status.")


def epilog(command: str) -> str:
    """The exit statuses of ``command`` (``--help``'s last part)."""
    if command == "check":
        return "exit status: 0 every check passed, 1 a check failed, 2 a usage error."
    if command == "report":
        return "exit status: 0 report written, 2 no event record in LOG_DIR (or a usage error)."
    if command == "stacks":
        return ("exit status: 0 stacks written, 1 no rank could be read (no py-spy), 2 no "
                "running job writes to LOG_DIR (or a usage error).")
    if command == "top":
        return ("exit status: 0 shown (live: until the job ends, q or Ctrl-C), 1 the job keeps "
                "no view of its ranks (--sample-interval 0), 2 no running job writes to "
                "LOG_DIR (or a usage error).")
    return _launch_statuses()


# each command's --help description (options.parser)
DESCRIPTIONS = {
    "run": "Launch MindSpore 2.x / PyTorch training through one mpirun over a hostfile.",
    "check": ("Preflight a multi-node launch: same options as a launch (SCRIPT optional); "
              "exit 0 all passed, 1 a check failed, 2 usage error."),
    "job": ("ModelArts-like entrypoint: run the same command on every host of a job "
            "(VC_WORKER_HOSTS, VC_TASK_INDEX, MA_NUM_GPUS, SSHD_PORT); worker-0 launches."),
    "report": ("Draw a finished (or running) job from its event record LOG_DIR/events.jsonl: "
               "one self-contained HTML file, LOG_DIR/report.html (no network needed to view it)."),
    "stacks": ("Every rank's Python stacks from a running job, without stopping it, into "
               "LOG_DIR/stacks/TIME/rank_R.txt, and the odd rank out: the one not where the others "
               "wait (needs py-spy: pip install 'mpilaunch[stall]')."),
    "top": ("Every rank of a running job, live, as htop shows a machine: its host, state, CPU %, "
            "memory, last output, the share of time it waits in collectives, and the straggler "
            "(press q to quit; --once: one table)."),
}


class Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, with the width found as ``shutil.get_terminal_size`` finds it but without
    importing shutil (bz2, lzma, zlib in every launch: docs/ARCHITECTURE.md, start-up; argparse
    makes a formatter for every option it adds)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: Optional[int] = None) -> None:
        if width is None:
            width = _columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _columns() -> int:
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns   # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80
