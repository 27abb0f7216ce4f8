"""What ``--version`` and the end of ``--help`` say (options.py puts them in every parser)."""
from __future__ import annotations


def version_text() -> str:
    """``--version``'s answer (also the first line of ``--dry-run``)."""
    import os
    import sys

    from mpilaunch import __version__

    # sys.version's first word is platform.python_version(), without importing platform
    # (every launch builds this for its parser)
    return (f"mpilaunch {__version__} (Python {sys.version.split()[0]}, "
            f"{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})")


def _launch_statuses() -> str:
    from mpilaunch.output import outcome

    return ("exit status:\n"
            "  0        success\n"
            "  1        a preflight check failed (nothing started)\n"
            "  2        a usage error (nothing started), or a rank's adapter refused a value\n"
            f"  {outcome.STALL_STATUS}      the stall watchdog ended the job (--stall-timeout)\n"
            "  128+N    mpilaunch was asked to stop by signal N (130: Ctrl-C, 143: SIGTERM), or\n"
            "           the failing rank was killed by signal N\n"
            f"  {outcome.LOST_HOST_STATUS}      a host was lost\n"
            "  other    the failing rank's exit code (the root cause the summary names)\n"
            "with --max_restarts: the last attempt's status.")


def epilog(command: str) -> str:
    """The exit statuses of ``command`` (``--help``'s last part)."""
    if command == "check":
        return "exit status: 0 every check passed, 1 a check failed, 2 a usage error."
    if command == "report":
        return "exit status: 0 report written, 2 no event record in LOG_DIR (or a usage error)."
    return _launch_statuses()
