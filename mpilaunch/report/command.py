"""``mpilaunch report LOG_DIR [-o FILE] [--png]``: the job's event record drawn as
LOG_DIR/report.html (and LOG_DIR/report.png)."""
from __future__ import annotations

import os
from typing import Sequence

from mpilaunch import rundir
from mpilaunch.config import options
from mpilaunch.errors import UsageError
from mpilaunch.report import html, model
from mpilaunch.report import png as png_mod


def make(log_dir: str, output: "str | None" = None, png: bool = False) -> "list[str]":
    """Write the report(s) of ``log_dir``; the paths written. UsageError when there is no
    event record."""
    if not os.path.isdir(log_dir):
        raise UsageError(f"LOG_DIR {log_dir!r}: no such directory; give the --log_dir of a job")
    job = model.load(log_dir)
    if job.start is None:
        raise UsageError(f"{job.path}: no launcher_start record: not an mpilaunch event record")
    out = output or os.path.join(log_dir, "report.html")
    try:   # readable as the logs beside it are: a report is for sharing
        rundir.write_atomic(out, html.render(job), mode=0o644)
    except OSError as exc:
        raise UsageError(f"--output {out!r}: {exc.strerror}") from None
    written = [out]
    if png:
        target = os.path.splitext(out)[0] + ".png"
        png_mod.render(job, target)
        written.append(target)
    return written


def main(argv: Sequence[str]) -> int:
    args = options.parser(options.REPORT).parse_args(list(argv))
    for path in make(args.log_dir, args.report_output, args.report_png):
        print(path)
    return 0
