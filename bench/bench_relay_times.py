"""The rank side relay's cost per chunk with and without its times index (mpilaunch/rank/relay.py).

Each round feeds a relay N chunks of one 100-byte line over a SOCK_SEQPACKET socket (a read
returns one chunk: the relay does N reads, N log writes, N console writes; its console is
/dev/null, its log a file) from a writer process, and takes the relay's thread CPU time.
Variants interleaved, medians. ``--before FILE``: also a relay.py of another version (e.g.
``git show REV:mpilaunch/rank/relay.py > /tmp/relay_before.py``).

    python3 bench/bench_relay_times.py [--chunks 100000] [--rounds 7] [--before FILE]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List

from mpilaunch.rank import relay as relay_mod

WRITER = ("import os, sys\nfd, n = int(sys.argv[1]), int(sys.argv[2])\nline = b'x' * 99 + b'\\n'\n"
          "for _ in range(n):\n    os.write(fd, line)\nos.close(fd)\n")


def one_round(relay: Callable[..., None], chunks: int, log_dir: str) -> float:
    """The relay's thread CPU seconds for ``chunks`` chunks."""
    r, w = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(w.fileno()), str(chunks)],
                              pass_fds=(w.fileno(),))
    w.close()
    log_fd = os.open(os.path.join(log_dir, "worker_0.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    out_fd = os.open(os.devnull, os.O_WRONLY)
    t0 = time.thread_time()
    relay(r.detach(), log_fd, b"[rank0] ", out_fd, 0.1)
    cpu = time.thread_time() - t0
    os.close(out_fd)
    writer.wait()
    size = os.path.getsize(os.path.join(log_dir, "worker_0.log"))
    assert size == 100 * chunks, size
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before", help="a relay.py to compare too")
    args = ap.parse_args()
    opener = relay_mod._Times.open

    def without_index(*a: object) -> None:
        relay_mod._Times.open = classmethod(lambda cls, fd: None)  # type: ignore[method-assign,assignment]
        try:
            relay_mod.relay(*a)  # type: ignore[arg-type]
        finally:
            relay_mod._Times.open = opener  # type: ignore[method-assign]

    variants: Dict[str, Callable[..., None]] = {"index": relay_mod.relay, "no index": without_index}
    if args.before:
        spec = importlib.util.spec_from_file_location("relay_before", args.before)
        assert spec and spec.loader
        before = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(before)
        variants["before"] = before.relay
    cpu: Dict[str, List[float]] = {k: [] for k in variants}
    records = 0
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.rounds):
            for name, fn in variants.items():
                cpu[name].append(one_round(fn, args.chunks, d))
                if name == "index":
                    records = os.path.getsize(os.path.join(d, ".worker_0.log.times")) // 16
    out = {name: {"us_per_chunk": round(statistics.median(v) / args.chunks * 1e6, 3),
                  "cpu_s": [round(x, 4) for x in v]} for name, v in cpu.items()}
    out["index_records_last_round"] = records  # type: ignore[assignment]
    out["load"] = os.getloadavg()  # type: ignore[assignment]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
