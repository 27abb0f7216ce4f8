"""``mpilaunch stacks LOG_DIR [--native] [--timeout S]``: every rank's stacks from a running
job, from a second terminal, without stopping it (docs/HANGS.md).

The running launcher named its socket in ``LOG_DIR/.mpilaunch-stacks`` (stacks/server.py); it
asks every rank over its control channel and writes ``LOG_DIR/stacks/TIME/rank_R.txt``. This
prints where they are and the verdict (stacks/verdict.py): the odd rank out and its frame.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from typing import Sequence, Tuple

from mpilaunch.config import options
from mpilaunch.errors import UsageError
from mpilaunch.stacks import server


def pointer(log_dir: str) -> Tuple[str, int]:
    """(the socket's path or ``EXEC``, the launcher's pid) named in ``log_dir``; UsageError when none."""
    if not os.path.isdir(log_dir):
        raise UsageError(f"LOG_DIR {log_dir!r}: no such directory; give the --log_dir of a running job")
    try:
        with open(os.path.join(log_dir, server.POINTER)) as f:
            lines = f.read().splitlines()
    except OSError:
        raise UsageError(f"no running mpilaunch job writes to {log_dir} (no {server.POINTER} "
                         "there: the job has ended, or it was started with another --log_dir)") from None
    if not lines or len(lines) < 2 or not lines[1].isdigit():
        raise UsageError(f"{os.path.join(log_dir, server.POINTER)}: not an mpilaunch pointer file")
    # a log dir on a shared file system is seen from every host, the launcher's socket and pid
    # only from its own: elsewhere, say where the job runs rather than that it has ended
    host = lines[2] if len(lines) > 2 else ""
    if host and host != os.uname().nodename:
        raise UsageError(f"the job writing to {log_dir} runs its launcher on host {host} "
                         f"(mpilaunch pid {lines[1]}), not on this one: run this command there")
    return lines[0], int(lines[1])


def request(log_dir: str, line: str, timeout: float, why_not_exec: str) -> bytes:
    """Send one request line to the launcher writing to ``log_dir``; its one-line answer.
    UsageError when none runs there (``why_not_exec``: what an --exec job cannot give)."""
    where, pid = pointer(log_dir)

    if where == server.EXEC:
        raise UsageError(f"the job writing to {log_dir} (mpilaunch pid {pid}) runs its program "
                         f"with --exec: no adapter stays beside it {why_not_exec}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(where)
    except OSError:
        sock.close()
        raise UsageError(f"no running mpilaunch job writes to {log_dir} (mpilaunch pid {pid} "
                         "does not answer at its socket: it has ended)") from None
    try:
        sock.sendall(f"{line}\n".encode())
        sock.settimeout(timeout)
        data = b""
        while not data.endswith(b"\n"):
            more = sock.recv(65536)
            if not more:
                break
            data += more
    finally:
        sock.close()
    if not data:
        raise UsageError(f"mpilaunch pid {pid} ended before it answered")
    return data


def ask(log_dir: str, native: bool = False, timeout: float = 60.0) -> dict:
    """The running launcher's answer (stacks/server.py's fields); UsageError when none runs."""
    data = request(log_dir, f"stacks {'native' if native else 'python'} {timeout:g}", timeout + 30,
                   "to read its stacks; on a rank's host, py-spy dump --native --pid PID reads it")
    return json.loads(data)


def render(answer: dict) -> str:
    if "error" in answer:
        return f"mpilaunch: {answer['error']}\n"
    lines = [f"mpilaunch: stacks of {answer['ranks']} of {answer['np']} ranks in "
             f"{answer['dir']} ({answer['seconds']:.1f} s)"]
    lines.append(f"verdict: {answer['verdict']}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    args = options.parser(options.STACKS).parse_args(list(argv))
    try:
        timeout = float(args.stacks_timeout or options.BY_DEST["stacks_timeout"].default)
    except ValueError:
        timeout = -1.0
    if not 0 < timeout <= 3600:
        raise UsageError(f"--timeout={args.stacks_timeout}: give seconds, more than 0 and at most 3600")
    answer = ask(args.log_dir, args.stacks_native, timeout)
    sys.stdout.write(render(answer))
    return 0 if answer.get("read") else 1
