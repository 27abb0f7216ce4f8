"""Write BYTES of LINE-byte lines to stdout, one write() call per line (like print()), and
record how long the writing took in the worker itself.

    python write_lines.py --bytes 200000000 --line 100 --report out.json

The report (JSON) holds ``write_s`` (first write -> last byte flushed), ``cpu_s`` (this
process's user+sys during the writing), ``bytes`` and ``lines``.
"""
import argparse
import json
import os
import resource
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=200_000_000)
    ap.add_argument("--line", type=int, default=100)
    ap.add_argument("--report", required=True)
    a = ap.parse_args()
    body = a.line - 12
    pool = [(f"{i:010d} " + ("abcdefghijklmnopqrstuvwxyz0123456789" * (body // 36 + 1))[:body] + "\n").encode()
            for i in range(1000)]
    n = a.bytes // a.line
    out = sys.stdout.buffer
    write = out.write
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for i in range(n):
        write(pool[i % 1000])
    out.flush()
    t1 = time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    rep = {"write_s": t1 - t0, "bytes": n * a.line, "lines": n,
           "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)}
    with open(a.report + ".tmp", "w") as fh:
        json.dump(rep, fh)
    os.replace(a.report + ".tmp", a.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
