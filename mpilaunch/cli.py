"""Command line: ``mpilaunch [run] [options] SCRIPT [ARGS...]``, ``mpilaunch check``,
``mpilaunch job``, ``mpilaunch report LOG_DIR``. Only dispatches: each command lives in its
own module, the options in ``options.py``.

User errors print one line ``mpilaunch: error: ...`` and exit 2, before anything starts.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from mpilaunch.errors import UsageError

SUBCOMMANDS = ("run", "check", "job", "report")


def entry() -> None:
    """The ``mpilaunch`` command (and ``python -m mpilaunch``): :func:`main`, then exit without
    the interpreter's finalisation, which frees every module and object one by one (measured
    ~11 ms here, after the job has ended and before the shell gets its status). The launcher's
    own files are written unbuffered (events.py, rundir.py) and its threads are daemons;
    Python's buffered stdout/stderr are flushed here."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:   # None: the fd was closed when Python started
                stream.flush()
        except (OSError, ValueError):   # a closed or broken pipe: nothing more can reach it
            pass
    os._exit(code if isinstance(code, int) else 1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from mpilaunch import events

    events.api_channel(os.environ.pop("MPILAUNCH_API_FD", None))   # api.py's pipe: not for the ranks
    command = "run"
    if argv and argv[0] in SUBCOMMANDS:
        command, argv = argv[0], argv[1:]
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
