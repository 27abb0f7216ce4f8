"""The check before a relaunch (mpilaunch/attempts/health.py; --restart-mode relaunch: in place,
the default, a killed worker restarts inside the running job and no host is checked) on 3 ssh
test hosts: rank 2's worker is killed by a signal (SIGKILL) on host 3, whose sshd was stopped
just before. The
next attempt is not spent on that host: with --min-hosts it is dropped and the job completes on
the two left; without, the job ends at once, exit 255, one line naming the host and why. Nothing
of the job is left on any host."""
import json

import pytest

from helpers import inhost
from helpers.mpis import OMPI5_MPIRUN
from helpers.procs import wait_for

pytestmark = [pytest.mark.multinode]

# attempt 0: every rank says it is up; rank 2 then kills itself (SIGKILL) once told to; a
# later attempt just succeeds
SCRIPT = """\
import os, signal, sys, time
rank, attempt = int(os.environ["RANK"]), int(os.environ["MPILAUNCH_RESTART_COUNT"])
out = sys.argv[1]
print(f"rank={rank} attempt={attempt}", flush=True)
if attempt == 0:
    open(os.path.join(out, f"up_{rank}"), "w").close()
    if rank == 2:
        while not os.path.exists(os.path.join(out, "crash")):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
"""


def _run(th, tmp_path, *args):
    out = tmp_path / "job"
    out.mkdir()
    script = tmp_path / "crash.py"
    script.write_text(SCRIPT)
    proc = inhost.launch(th, OMPI5_MPIRUN, out, 3, ["--restart-mode", "relaunch", *args],
                         [str(script), str(out)])
    try:
        assert wait_for(lambda: all((out / f"up_{r}").exists() for r in range(3)), 120, 0.1), \
            (out / "launcher.err").read_text()
        th.kill_sshd(2)                 # host 3 takes no new ssh connection from now on
        (out / "crash").touch()         # ... and its rank's worker is killed by a signal
    finally:
        rc, _, err = inhost.finish(proc, out, 180)
    return rc, err, out


def _names(th, i):
    return (th.host(i).addr, th.host(i).hostname)


def _nothing_left(th):
    for host in (0, 1, 2):
        left = wait_for(lambda: not inhost.in_host(th, host), 20) or inhost.in_host(th, host)
        assert left is True, [(p.pid, p.info["cmdline"]) for p in left]


def test_with_min_hosts_the_host_is_dropped_and_the_job_completes(testhosts_healthy, tmp_path):
    th = testhosts_healthy
    rc, err, out = _run(th, tmp_path, "--max_restarts", "1", "--min-hosts", "2")
    assert rc == 0, err
    lines = err.splitlines()
    checked = [ln for ln in lines if "failed its check before attempt 1: ssh-port: " in ln]
    assert len(checked) == 1 and any(f"mpilaunch: host {n} failed" in checked[0]
                                     for n in _names(th, 2)), err
    assert any(f"mpilaunch: host {n} dropped (--min-hosts 2): attempt 1 runs on 2 host(s), "
               "world size 2" in lines for n in _names(th, 2)), err
    assert "  attempt 1: succeeded" in "\n".join(lines)
    assert "attempt=1" in (out / "logs" / "attempt1" / "worker_1.log").read_text()
    assert not (out / "logs" / "attempt1" / "worker_2.log").exists()
    _nothing_left(th)


def test_without_min_hosts_the_job_ends_at_once_naming_the_host(testhosts_healthy, tmp_path):
    th = testhosts_healthy
    rc, err, out = _run(th, tmp_path, "--max_restarts", "2")
    assert rc == 255, err
    lines = err.splitlines()
    ended = [ln for ln in lines if "failed its check before attempt 1" in ln
             and ln.startswith("mpilaunch: host ")]
    assert len(ended) == 1, err
    assert any(ended[0].startswith(f"mpilaunch: host {n} failed its check before attempt 1: "
                                   "ssh-port: ") for n in _names(th, 2)), err
    assert ended[0].endswith("not restarting onto it (give --min-hosts to go on without it)")
    assert ("mpilaunch: 1 attempt(s), restart budget 2; exit status 255 (a host failed its "
            "check before a restart)") in lines
    assert "restarting the job" not in err
    assert not (out / "logs" / "attempt1").exists()
    _nothing_left(th)


@pytest.mark.parametrize("level", [[], ["--preflight", "deep"]], ids=["ssh", "deep"])
def test_a_healthy_host_is_checked_and_relaunched_onto(level, testhosts_healthy, tmp_path):
    """The same crash with host 3's sshd alive: it passes its check (``check --deep``'s too
    with --preflight deep), every host runs attempt 1."""
    th = testhosts_healthy
    out = tmp_path / "job"
    out.mkdir()
    script = tmp_path / "crash.py"
    script.write_text(SCRIPT)
    proc = inhost.launch(th, OMPI5_MPIRUN, out, 3, ["--max_restarts", "1", "--restart-mode",
                                                    "relaunch", *level],
                         [str(script), str(out)])
    try:
        assert wait_for(lambda: all((out / f"up_{r}").exists() for r in range(3)), 120, 0.1), \
            (out / "launcher.err").read_text()
        (out / "crash").touch()
    finally:
        rc, _, err = inhost.finish(proc, out, 180)
    assert rc == 0, err
    assert "failed its check" not in err
    recs = [json.loads(line) for line in (out / "logs" / "events.jsonl").read_text().splitlines()]
    check = [r for r in recs if r["kind"] == "host_check"]
    assert [(r["checked"], r["level"], r["failed"]) for r in check] == [
        ([th.host(2).addr], "deep" if level else "ssh", {})], check
    assert "attempt=1" in (out / "logs" / "attempt1" / "worker_2.log").read_text()
    _nothing_left(th)
