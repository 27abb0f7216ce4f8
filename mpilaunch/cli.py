"""Command line: ``mpilaunch [run] [options] SCRIPT [ARGS...]``, ``mpilaunch check``,
``mpilaunch job``, ``mpilaunch report LOG_DIR``, ``mpilaunch stacks LOG_DIR``, ``mpilaunch top
LOG_DIR``, ``mpilaunch logs LOG_DIR``. Only dispatches: each command lives in its own module, the options in ``options.py``.

User errors print one line ``mpilaunch: error: ...`` and exit 2, before anything starts.
"""
from __future__ import annotations

import gc
import os
import sys
TYPE_CHECKING = False     # typing is imported later, with the collector off (main)
if TYPE_CHECKING:
    from typing import Optional, Sequence

from mpilaunch.errors import UsageError

SUBCOMMANDS = ("run", "check", "job", "report", "stacks", "top", "logs")


def entry() -> None:
    """The ``mpilaunch`` command (and ``python -m mpilaunch``): :func:`main`, then
    ``pdeathsig.exit_now`` (no finalisation after the job has ended, before the shell gets
    its status)."""
    from mpilaunch.pdeathsig import exit_now

    code = main()
    exit_now(code if isinstance(code, int) else 1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    # A launch's start-up (imports, the plan) keeps what it allocates: there is no garbage
    # cycle to collect before mpirun runs, and the collector's passes over the imported
    # modules cost every launch its share (docs/ARCHITECTURE.md, start-up). The starter turns it back on once mpirun runs
    # (supervise/starter.py); the other commands at once.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv), collecting)
    finally:
        if collecting:
            gc.enable()


def _dispatch(argv: list, collecting: bool) -> int:
    from mpilaunch.output import events

    events.api_channel(os.environ.pop("MPILAUNCH_API_FD", None))   # api.py's pipe: not for the ranks
    command = "run"
    if argv and argv[0] in SUBCOMMANDS:
        command, argv = argv[0], argv[1:]
    if command != "run" and collecting:
        gc.enable()
    try:
        if command == "check":
            from mpilaunch.check.command import main as check_main
            return check_main(argv)
        if command == "job":
            from mpilaunch.job.command import main as job_main
            return job_main(argv)
        if command == "report":
            from mpilaunch.report.command import main as report_main
            return report_main(argv)
        if command == "stacks":
            from mpilaunch.stacks.command import main as stacks_main
            return stacks_main(argv)
        if command == "top":
            from mpilaunch.stacks.topcommand import main as top_main
            return top_main(argv)
        if command == "logs":
            from mpilaunch.output.logscommand import main as logs_main
            return logs_main(argv)
        from mpilaunch.run import main as run_main
        return run_main(argv)
    except UsageError as exc:
        if not events.tell_api("error", str(exc)):   # the API raises it instead
            print(f"mpilaunch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
