"""The launcher's CPU for the monitor, by the job's size (docs/MONITOR.md): what one monitor round
costs the launching node at N ranks, for N in ``--ranks`` (default 4, 16, 64, 256).

One round is what the launcher does for every rank's sample of one interval: the sample is
decoded from the control channel's bytes (``model.Sample.from_wire``, what ``supervise/control.py``
does with a ``sample`` message), fed to the job's board (``monitor/board.py``: the round, the
straggler rule), the round's ``wait_share`` record and any ``straggler`` record serialised and
written to a file (as ``output/events.py`` does), and one ``JobView`` built for a reader (a
``mpilaunch top`` client polling once an interval). The samples are made up with realistic
values (one slow rank among balanced ones, so the rule has something to judge and to tell);
the rank side's sampling (py-spy, ``/proc``) is bench_monitor.py's. The socket read of each
message is left out (one ``recv`` of ~300 bytes per rank and interval).

The figure is CPU time (``time.process_time``) per round, the median of ``--repeats`` runs of
``--rounds`` rounds each, so it does not depend on the machine's load; divided by the interval
it is the launcher's share of one core.

    python3 bench/bench_monitor_launcher.py [--ranks 4,16,64,256] [--rounds 200] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from mpilaunch.monitor.board import Board
from mpilaunch.monitor.model import Sample

INTERVAL = 10.0     # s: the default where py-spy can attach (config/monitoring.py)


class Clock:
    """The board's clock, moved one interval a round (the rounds close on their samples)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wires(n: int, k: int) -> list:
    """Round ``k``'s samples of ``n`` ranks as the control channel carries them: rank
    ``n // 2`` hardly waits, the others wait most of the time."""
    out = []
    for rank in range(n):
        slow = rank == n // 2
        out.append(Sample(rank=rank, role="worker", pid=10000 + rank, t=1.7e9 + k * INTERVAL,
                          cpu_s=0.8 * k + rank * 0.01, rss=250_000_000 + rank * 4096,
                          output_t=1.7e9 + k * INTERVAL - 1.0,
                          wait_share=0.05 + 0.01 * (k % 3) if slow else 0.80 + 0.01 * (rank % 5),
                          hot_frame="train.py:13 in load_batch" if slow else "train.py:15 in step",
                          stack_samples=60).to_wire())
    return out


def run(n: int, rounds: int) -> float:
    """CPU seconds per round at ``n`` ranks."""
    with tempfile.TemporaryFile("w") as record:
        def write(kind, **fields):
            record.write(json.dumps({"v": 1, "t": time.time(), "kind": kind, **fields},
                                    separators=(",", ":"), default=str) + "\n")

        clock = Clock()
        board = Board(INTERVAL, clock=clock,
                      on_round=lambda shares: write("wait_share", shares=shares),
                      on_change=lambda change: write("straggler", **change.fields()))
        board.attempt_started(0, n)
        made = [wires(n, k) for k in range(rounds)]    # the adapters' work, not the launcher's
        start = time.process_time()
        for k in range(rounds):
            clock.now += INTERVAL
            for data in made[k]:
                board.feed(Sample.from_wire(data, host=f"h{int.from_bytes(data[-2:], 'big') % 8}"))
            board.view()
        return (time.process_time() - start) / rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="4,16,64,256")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    load = os.getloadavg()[0]
    print(f"launcher CPU per monitor round (median of {args.repeats} x {args.rounds} rounds; "
          f"load {load:.1f})")
    print(f"{'ranks':>6} {'ms/round':>9} {'us/rank':>8} {'core share at 10 s':>19}")
    for n in sizes:
        per = statistics.median(run(n, args.rounds) for _ in range(args.repeats))
        print(f"{n:>6} {per * 1e3:>9.3f} {per * 1e6 / n:>8.1f} {per / INTERVAL * 100:>18.4f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
