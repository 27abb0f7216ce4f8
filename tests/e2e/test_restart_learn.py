"""In-place restarts, the spare that is what the worker was (rank/inplace/learn.py, spare.py):
the restarted workers of a DDP job (gloo, SGD, a checkpoint loaded with torch.load) find
already imported what the previous attempt's workers imported, DDP's ~800 modules at first use
included; the script's own modules are not among them. Asserted from the workers: each records
which modules its interpreter had when its first line ran. Real mpirun, real torch."""
import json
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import OMPI5
from helpers.procs import watch_to_end
from helpers.restart import DDP_TRAIN

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")

PRIMED = re.compile(r"^mpilaunch\.rank: rank (\d): spare primed: \+(\d+) modules \((\d+) in all\), "
                    r"asked at ([0-9.]+)$")


def _lines_so_far(path):
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def test_restarted_ddp_workers_find_what_the_last_ones_imported(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "train.py"
    (tmp_path / "mymodel.py").write_text("X = 1\n")   # the user's own module: never primed
    ddp = "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    script.write_text(DDP_TRAIN.replace(ddp, ddp + "import mymodel\n"))
    err_path = tmp_path / "stderr"
    argv = mpilaunch_argv("--mpirun", OMPI5.mpirun, "-np", "2", "--no-scheduler", "--master_port",
                          "0", "--log_dir", str(tmp_path / "logs"), "--max_restarts", "1",
                          str(script), str(out))
    with open(err_path, "w") as err_fh:
        proc = subprocess.Popen(argv, env=clean_env(MPILAUNCH_DEBUG_SPARE=1), cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err_fh,
                                text=True)
        try:
            # wait for the state, not a time: both workers past their first step, and each
            # rank's adapter has since asked its worker and primed the next spare
            deadline = time.monotonic() + 240
            primed_after = {}
            while len(primed_after) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                for ln in _lines_so_far(err_path):
                    m = PRIMED.match(ln)
                    settled = out / f"settled_0_{m.group(1)}" if m else None
                    if m and settled.exists() and float(m.group(4)) > float(settled.read_text()):
                        primed_after[int(m.group(1))] = int(m.group(3))
            assert len(primed_after) == 2, err_path.read_text()
            os.kill(int((out / "holding_1").read_text()), 9)
        finally:
            _, _, _, kids = watch_to_end(proc, 240)
    err = err_path.read_text()
    assert proc.returncode == 0, err
    assert "restarted in place: attempt 1 of at most 2" in err, err
    for rank in (0, 1):
        said = [ln.rsplit(": spare ", 1)[1] for ln in err.splitlines()
                if ln.startswith(f"mpilaunch.rank: rank {rank}: spare ") and "primed" not in ln]
        assert said == ["ready"], (rank, said, err)
        assert (out / f"done_{rank}").read_text() == "ok"
        first = set(json.loads((out / f"seen_0_{rank}").read_text()))
        imported = set(json.loads((out / f"imported_0_{rank}").read_text()))
        seen = set(json.loads((out / f"seen_1_{rank}").read_text()))
        # attempt 0's worker started fresh: none of DDP's first-use imports were there (rank 0's
        # had torch: it serves its store before its script runs, rank/inplace/adopt.py
        # first_store)
        assert ("torch" in first) == (rank == 0)
        assert "torch._dynamo" not in first and "sympy" not in first
        # the restarted one had them at its first line: torch, DDP's (torch._dynamo, sympy...)
        imported |= {n for n in first if n.startswith("torch")}    # rank 0's store's
        for name in ("torch", "torch.distributed", "torch._dynamo", "torch._dynamo.convert_frame",
                     "sympy", "torch.optim.sgd", "torch.nn.parallel.distributed"):
            assert name in imported and name in seen, (rank, name)
        lib = {n for n in imported if n.startswith(("torch", "sympy", "mpmath"))}
        missing = sorted(lib - seen)
        assert len(missing) <= len(lib) // 50, (rank, len(lib), missing[:20])
        # never the user's: the script's own module
        assert "mymodel" in imported and "mymodel" not in seen, rank
    # where the restart's time went: its attempt line and the event record
    line = [ln for ln in err.splitlines() if ln.startswith("  attempt 0: ")]
    assert len(line) == 1 and re.search(
        r"; restarted in place in [0-9.]+ s \(detection [0-9.]+, teardown [0-9.]+, start "
        r"[0-9.]+, to first output [0-9.]+; a spare on 2 of 2 ranks\)", line[0]), err
    record = [json.loads(ln) for ln in (tmp_path / "logs" / "events.jsonl").read_text().splitlines()]
    timed = [r for r in record if r["kind"] == "restart_phases"]
    assert len(timed) == 1 and timed[0]["from_attempt"] == 0 and timed[0]["attempt"] == 1
    assert timed[0]["spare"] == {"ready": 2}
    assert all(timed[0]["phases"][p] is not None for p in ("detection", "teardown", "start",
                                                           "first_output"))
    assert abs(sum(timed[0]["phases"].values()) - timed[0]["total"]) < 0.01
    # and the report shows it: attempt 1 starts at the failure, with the same phases and spares
    rep = subprocess.run([sys.executable, "-m", "mpilaunch", "report", str(tmp_path / "logs")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert rep.returncode == 0, rep.stderr
    page = (tmp_path / "logs" / "report.html").read_text()
    ph = timed[0]["phases"]
    said = re.findall(r'<p class="facts restart" data-from="0" data-attempt="1"[^>]*>(.*?)</p>', page)
    assert len(said) == 1 and re.fullmatch(
        rf"restarted in place from attempt 0 in {timed[0]['total']:.3f} s: detection "
        rf"{ph['detection']:.3f} s \(rank [01]\), teardown {ph['teardown']:.3f} s \(rank [01]\), "
        rf"start {ph['start']:.3f} s \(rank [01]\), to first output {ph['first_output']:.3f} s "
        r"\(rank [01]\); new workers: spare \(ready\): ranks 0-1", said[0]), said
    assert page.count('class="restart-phase ') == 4
    rows = re.findall(r'<g class="row rank" data-rank="(\d)"[^>]*data-new-worker="([^"]*)"', page)
    assert rows == [("0", "spare (ready)"), ("1", "spare (ready)")], rows
    assert re.findall(r'data-rank="(\d)"[^>]*data-root="1"', page) == ["1"]   # the killed rank
    left = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [p.pid for p in left]
