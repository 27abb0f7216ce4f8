"""Elastic shrink (--min-hosts) on 3 ssh test hosts, real PyTorch (gloo), in the default restart
mode (in place): host 3's link is pulled mid-job. That is not a worker's failure, so the job
falls back to a relaunch by itself (a second mpirun), saying why, which runs on the 2 hosts left
with the world size recomputed, resumes from the checkpoint and completes: its final parameters
are those of an uninterrupted 2-host run resumed from the same checkpoint, bit for bit. Nothing
of it is left on any host. The time from the pulled link to the relaunched job's first step is
printed (``pytest -s``): the default mode's fallback figure of docs/PERFORMANCE.md."""
import json
import shutil
import subprocess
import sys
import time

import pytest

from helpers import inhost
from helpers.mpis import OMPI5_MPIRUN
from helpers.procs import wait_for
from helpers.restart import TRAIN

pytestmark = [pytest.mark.multinode, pytest.mark.slow, pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")]


def _launcher(th, mpirun, tmp_path, name, *args, n_hosts, script_args=(), exist_ok=False):
    """``mpilaunch`` running train.py over an ``n_hosts`` hostfile (1 rank each), inside host 1."""
    out = tmp_path / name
    out.mkdir(exist_ok=exist_ok)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return inhost.launch(th, mpirun, out, n_hosts, args,
                         [str(script), "--out", str(out), *script_args]), out


def test_lost_host_the_job_goes_on_on_the_two_left(testhosts_healthy, tmp_path):
    th = testhosts_healthy
    proc, out = _launcher(th, OMPI5_MPIRUN, tmp_path, "job", "--max_restarts", "1",
                          "--min-hosts", "2", n_hosts=3,
                          script_args=("--hold-step", "5", "--kill-rank", "2"))
    try:
        # rank 2 (host 3) waits at step 5: the step-3 checkpoint is written and is the one the
        # next attempt resumes from
        assert wait_for(lambda: (out / "holding_2").exists(), 180, 0.2), \
            (out / "launcher.err").read_text()
        snapshot = tmp_path / "ref"
        snapshot.mkdir()
        shutil.copy(out / "ckpt.pt", snapshot / "ckpt.pt")
        t_down = time.time()
        th.link_down(2)
    finally:
        rc, _, err = inhost.finish(proc, out, 240)
        th.link_up(2)
    assert rc == 0, err
    victim = th.host(2)
    assert any(f"host {name} dropped (--min-hosts 2): attempt 1 runs on 2 host(s), world size 2"
               in err for name in (victim.addr, victim.hostname)), err
    assert "attempt 0: exit status 255: host" in err and "world size 2" in err, err
    assert "attempt 1: succeeded" in err, err
    # in place was the mode: the lost host made it a relaunch, said in the summary and the record
    assert any(f"; relaunched (host {name} lost)" in err for name in (victim.addr, victim.hostname))
    recs = [json.loads(ln) for ln in (out / "logs" / "events.jsonl").read_text().splitlines()]
    fell = [(r["mode"], r.get("fallback", "")) for r in recs if r["kind"] == "restart"]
    assert len(fell) == 1 and fell[0][0] == "relaunch" and fell[0][1].endswith(" lost"), fell
    first = max(float((out / f"first_step_1_{r}").read_text()) for r in (0, 1))
    print(f"link down -> the relaunched job's first step: {first - t_down:.2f} s")
    for r in (0, 1):
        log = (out / "logs" / "attempt1" / f"worker_{r}.log").read_text()
        assert f"rank={r} restart=1" in log and "step 4" in log and "step 3\n" not in log, log
    assert not (out / "logs" / "attempt1" / "worker_2.log").exists()
    # the reference: 2 hosts from the same checkpoint, never interrupted
    proc, ref = _launcher(th, OMPI5_MPIRUN, tmp_path, "ref", n_hosts=2, exist_ok=True)
    rc, _, rerr = inhost.finish(proc, ref, 240)
    assert rc == 0, rerr
    assert "step 4" in (ref / "logs" / "worker_0.log").read_text()
    assert json.loads((out / "final.json").read_text()) == json.loads((ref / "final.json").read_text())
    for host in (0, 1, 2):
        left = wait_for(lambda: not inhost.in_host(th, host), 20) or inhost.in_host(th, host)
        assert left is True, [(p.pid, p.info["cmdline"]) for p in left]
