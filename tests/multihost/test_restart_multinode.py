"""Job-wide restart across 2 ssh test hosts, in place (the default: one mpirun, the adapters
restart every worker) and relaunched (--restart-mode relaunch: a second mpirun): real PyTorch
(gloo), the launcher inside host 1's namespaces (as worker-0 on a platform), rank 1's worker on
host 2 SIGKILLed from outside at a step of attempt 0. The job completes on attempt 1 from the checkpoint with the
final parameters of an uninterrupted run, bit for bit, and nothing of it is left on any host."""
import json
import subprocess
import sys

import psutil
import pytest

from helpers import inhost
from helpers.mpis import MPIRUNS
from helpers.procs import wait_for
from helpers.restart import TRAIN, worker_script

pytestmark = [pytest.mark.multinode, pytest.mark.slow, pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")]


def _launcher(th, mpirun, tmp_path, name, *args, script_args=()):
    """``mpilaunch`` running train.py over a 2-host hostfile (1 rank each), inside host 1."""
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return inhost.launch(th, mpirun, out, 2, args,
                         [str(script), "--out", str(out), *script_args]), out


def _worker_on(th, host, script, rank, attempt):
    """The worker process (not its adapter) of ``rank`` and ``attempt`` inside ``host``,
    found by its namespace, command line and environment."""
    hits = []
    for p in inhost.in_host(th, host):
        try:
            cmd = p.cmdline()
            if worker_script(cmd) != script:     # the adapter runs rank/_boot.py
                continue
            env = p.environ()
        except psutil.Error:
            continue
        if env.get("RANK") == str(rank) and env.get("MPILAUNCH_RESTART_COUNT") == str(attempt):
            hits.append(p)
    return hits


def _store_holder(th, host):
    """Rank 0's store holder inside ``host``, once it is ready (its name: rank/inplace/hold.py)."""
    for p in inhost.in_host(th, host):
        try:
            if p.name() == "mpilaunch-store":
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.parametrize("mode", ["in-place", "relaunch"])
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_worker_killed_on_host2_restarts_across_hosts_from_checkpoint(testhosts, mpirun, mode,
                                                                     tmp_path):
    th = testhosts
    proc, ref = _launcher(th, mpirun, tmp_path, "ref")
    rc, _, err = inhost.finish(proc, ref, 240)
    assert rc == 0, err

    proc, out = _launcher(th, mpirun, tmp_path, "job", "--max_restarts", "1",
                          *(["--restart-mode", "relaunch"] if mode == "relaunch" else []),
                          script_args=("--hold-step", "5"))
    try:
        # rank 1 (host 2) reaches step 5 of attempt 0 (the step-3 checkpoint is written) and waits
        assert wait_for(lambda: (out / "holding_1").exists(), 180, 0.2), \
            (out / "launcher.err").read_text()
        script = str(tmp_path / "train.py")
        if mode == "in-place":      # rank 0's store holder (host 1) ready: the restart's store held
            assert wait_for(lambda: _store_holder(th, 0), 120, 0.2), (out / "launcher.err").read_text()
        victims = wait_for(lambda: _worker_on(th, 1, script, rank=1, attempt=0), 10)
        assert victims and len(victims) == 1, victims
        victim, = victims
        assert str(victim.pid) == (out / "holding_1").read_text()   # it is the one holding
        assert not _worker_on(th, 0, script, rank=1, attempt=0)     # and it is not on host 1
        victim.kill()
    finally:
        rc, stdout, err = inhost.finish(proc, out, 240)
    assert rc == 0, err
    # bit for bit the parameters of the run that was never interrupted
    assert json.loads((out / "final.json").read_text()) == json.loads((ref / "final.json").read_text())
    # attempt 1 resumed from the step-3 checkpoint on both hosts
    for r in (0, 1):
        log = (out / "logs" / "attempt1" / f"worker_{r}.log").read_text()
        assert f"rank={r} restart=1 torchelastic=1" in log and "step 4" in log
        assert "step 1\n" not in log and "step 3\n" not in log
    assert (out / "logs" / "attempt0" / "worker_1.log").exists()   # attempt 0's logs kept
    assert "attempt 0: exit status 137" in err and "attempt 1: succeeded" in err, err
    assert "killed by signal 9" in err, err
    assert "2 attempt(s), restart budget 1; exit status 0" in err
    records = [json.loads(line) for line in (out / "logs" / "events.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].count("starter_start") == (1 if mode == "in-place" else 2)
    assert [r["mode"] for r in records if r["kind"] == "restart"] == [mode]
    # in place, each rank's next worker was a client of the store held on host 1 (as torchrun's)
    held = {r["rank"]: r["host"] for r in records if r.get("event") == "store-held"}
    names = {0: th.hosts[0].hostname, 1: th.hosts[1].hostname}
    assert held == (names if mode == "in-place" else {}), held
    # nothing of the job left on either host (both namespaces; the launcher ran in host 1's)
    for host in (0, 1):
        left = wait_for(lambda: not inhost.in_host(th, host), 20) or inhost.in_host(th, host)
        assert left is True, [(p.pid, p.info["cmdline"]) for p in left]
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert mine == [], [p.info["cmdline"] for p in mine]
