"""`mpilaunch logs` orders two ranks' lines by the times the relays read them (the times index,
mpilaunch/rank/relay.py), where the estimate from log sizes gets them backwards (docs/LOGS.md)."""
import os
import shutil
import subprocess
import sys

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import OMPI5, mpilaunch_argv
from helpers.ports import free_port

import pytest

pytestmark = pytest.mark.skipif(OMPI5.missing() is not None, reason=str(OMPI5.missing()))

# rank 0 prints A at the end of a big log, then waits until rank 1 printed B (after seeing A in
# rank 0's log) and the record has rank 1's first output, then one more line: by log sizes A sits
# at ~100% of rank 0's span, late; B at 0% of rank 1's, early. Real times: A, then B.
SCRIPT = """\
import json, os, time
rank, marks = int(os.environ["RANK"]), os.environ["MARKS"]
logs = os.path.join(marks, "logs")

def wait(pred):
    while not pred():
        time.sleep(0.02)

def first_output_of_1():
    try:
        with open(os.path.join(logs, "events.jsonl")) as f:
            return next((r["t"] for r in map(json.loads, f) if r.get("kind") == "first_output"
                         and r.get("rank") == 1), None)
    except (OSError, ValueError):
        return None

if rank == 0:
    print(("filler " + "x" * 92 + "\\n") * 2000, end="", flush=True)
    print("A", flush=True)
    wait(lambda: open(os.path.join(logs, "worker_0.log"), "rb").read().endswith(b"A\\n"))
    open(os.path.join(marks, "a_seen"), "w").close()
    wait(lambda: first_output_of_1() is not None)
    t1 = first_output_of_1()
    wait(lambda: time.time() > t1 + 0.05)     # the log's mtime (a coarse clock) past it
    print("end", flush=True)
else:
    wait(lambda: os.path.exists(os.path.join(marks, "a_seen")))
    print("B", flush=True)
"""


def _logs(*args):
    return subprocess.run([sys.executable, "-m", "mpilaunch", "logs", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def test_logs_orders_ranks_by_the_times_their_lines_were_read(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(SCRIPT)
    logs = tmp_path / "logs"
    p = subprocess.run(mpilaunch_argv(OMPI5, "-np", "2", "--master_port", free_port(), "--log_dir", str(logs),
                                      "--console_budget", "0", str(script)),
                       capture_output=True, text=True, env=clean_env(MARKS=str(tmp_path)), cwd=tmp_path,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    filler = (b"filler " + b"x" * 92 + b"\n") * 2000
    assert (logs / "worker_0.log").read_bytes() == filler + b"A\nend\n"    # the workers' bytes
    assert (logs / "worker_1.log").read_bytes() == b"B\n"
    got = _logs(str(logs), "--grep", "^[AB]$")
    assert (got.returncode, got.stderr, got.stdout) == (0, "", "[rank0] A\n[rank1] B\n")
    # the same logs without their indexes (an older job's): estimated by sizes, B comes first
    old = tmp_path / "old"
    shutil.copytree(logs, old, ignore=shutil.ignore_patterns(".*.times"))
    assert sorted(os.listdir(logs)) == sorted(os.listdir(old) + [".worker_0.log.times", ".worker_1.log.times"])
    assert _logs(str(old), "--grep", "^[AB]$").stdout == "[rank1] B\n[rank0] A\n"
