"""Real launches through MPICH's and Intel MPI's mpiexec (venvs of scripts/setup_hydra.sh),
checked as tests/e2e/test_launch_real.py checks Open MPI: identity, broadcast byte-exact, secrets,
failing and SIGKILLed workers, launcher SIGINT, nothing left (psutil)."""
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import HYDRA, mpilaunch_argv
from helpers.ports import free_port
from helpers.procs import descendants, kill_all, wait_for, wait_gone

ODD = {"MA_SPACES": "a b  c", "MA_QUOTES": "'\"x;y\\", "MA_CRLF": "l1\r\nl2", "MA_UTF8": "café ✓",
       "MA_LONG": "x" * 3000, "MA_SECRET_TOKEN": "s3cr3t-value"}

DUMP = """\
import json, os, sys
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
with open(os.path.join(os.environ["DUMP_DIR"], "rank%s.json" % os.environ["RANK_ID"]), "w") as fh:
    json.dump(dict(os.environ), fh)
print("hello from rank", os.environ["RANK_ID"], flush=True)
"""

WORK = """\
import os, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED": sys.exit(0)
r, n = os.environ["RANK_ID"], int(os.environ["RANK_SIZE"])
open(os.path.join(os.environ["OUT"], "up" + r), "w").close()
if r == "2" and sys.argv[1] != "none":
    end = time.time() + 60     # fail once every rank is up (the test waits for them all)
    while time.time() < end and not all(os.path.exists(os.path.join(os.environ["OUT"], "up%d" % i))
                                        for i in range(n)):
        time.sleep(0.05)
    time.sleep(0.5)
    print("about to fail", flush=True)
    if sys.argv[1] == "exit": sys.exit(3)
    os.kill(os.getpid(), 9)
time.sleep(120)
"""


def launch(mpi, args, env, **kw):
    return subprocess.Popen(mpilaunch_argv(mpi, "--master_port", free_port(), *args), env=env, cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


@pytest.mark.parametrize("mpi", HYDRA)
def test_four_ranks_identity_and_exact_broadcast(mpi, tmp_path):
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = clean_env(DUMP_DIR=tmp_path, TMPDIR=tmpdir, **ODD)
    proc = launch(mpi, ["-np", "4", "--log_dir", str(tmp_path / "logs"), str(script)], env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    ranks = {}
    for r in range(4):
        with open(tmp_path / f"rank{r}.json") as fh:
            ranks[r] = json.load(fh)
    for r, seen in ranks.items():
        assert (seen["RANK"], seen["RANK_ID"], seen["MS_NODE_ID"]) == (str(r),) * 3
        assert seen["WORLD_SIZE"] == seen["MS_WORKER_NUM"] == "4"
        assert seen["MASTER_ADDR"] == seen["MS_SCHED_HOST"] == "127.0.0.1"
        assert seen["PMI_RANK"] == str(r)   # really Hydra's
        for name, value in ODD.items():
            assert seen[name] == value, name
        assert seen["PATH"] == env["PATH"]
    assert sorted(int(r["LOCAL_RANK"]) for r in ranks.values()) == [0, 1, 2, 3]
    for r in range(4):
        assert f"[rank{r}] hello from rank {r}" in out
    assert "s3cr3t-value" not in out + err
    logs = {n for n in os.listdir(tmp_path / "logs") if not n.startswith(".")} - {"scheduler.log"}   # scheduler: per the scheduler rule
    assert sorted(logs) == ["events.jsonl"] + [f"worker_{r}.log" for r in range(4)]
    assert list(tmpdir.iterdir()) == []


@pytest.mark.parametrize("mpi", HYDRA)
def test_no_secret_in_any_argv_and_no_pinning(mpi, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        "import os, sys, json, psutil\n"
        "if os.environ.get('MS_ROLE') == 'MS_SCHED': sys.exit(0)\n"
        "me = psutil.Process()\n"
        "top = [p for p in me.parents() if p.name().startswith('mpiexec')][0]\n"
        "def argv(p):\n"
        "    try: return ' '.join(p.cmdline())\n"
        "    except psutil.Error: return ''\n"
        "argvs = [argv(p) for p in [top] + top.children(recursive=True)]\n"
        "json.dump({'leak': any(os.environ['MA_SECRET_TOKEN'] in a for a in argvs),\n"
        "           'cpus': len(os.sched_getaffinity(0))},\n"
        "          open(os.path.join(os.environ['DUMP_DIR'], os.environ['RANK_ID']), 'w'))\n")
    env = clean_env(DUMP_DIR=tmp_path, MA_SECRET_TOKEN="zz-secret-zz")
    proc = launch(mpi, ["-np", "2", "--no-scheduler", "--log_dir", str(tmp_path / "logs"), str(script)], env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    for r in range(2):
        seen = json.loads((tmp_path / str(r)).read_text())
        assert seen == {"leak": False, "cpus": os.cpu_count()}


@pytest.mark.parametrize("mpi", HYDRA)
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_failing_worker_ends_the_job(mpi, how, tmp_path):
    script = tmp_path / "work.py"
    script.write_text(WORK)
    proc = launch(mpi, ["-np", "4", "--log_dir", str(tmp_path / "logs"), str(script), how], clean_env(OUT=tmp_path))
    try:
        assert wait_for(lambda: all((tmp_path / f"up{r}").exists() for r in range(4)), 60)
        start = time.monotonic()      # rank 2 fails 0.5 s after this
        job = descendants(proc.pid)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - start
        assert proc.returncode == (3 if how == "exit" else 137), err
        assert elapsed < 15, f"a failed rank should end the job within seconds, took {elapsed:.1f}s"
        assert "root cause: rank 2 (worker) on host" in err
        assert ("exit code 3" if how == "exit" else "killed by signal 9") in err
        assert f"log: {tmp_path / 'logs' / 'worker_2.log'}" in err and "| about to fail" in err
        left = wait_gone(job, 15)   # hydra_pmi_proxy included
        assert left == [], [p.cmdline() for p in left]
    finally:
        kill_all(descendants(proc.pid))
        proc.kill()


@pytest.mark.parametrize("mpi", HYDRA)
def test_launcher_sigint_ends_everything(mpi, tmp_path):
    script = tmp_path / "work.py"
    script.write_text(WORK)
    proc = launch(mpi, ["-np", "2", "--no-scheduler", "--log_dir", str(tmp_path / "logs"), str(script), "none"],
                  clean_env(OUT=tmp_path))
    try:
        assert wait_for(lambda: all((tmp_path / f"up{r}").exists() for r in range(2)), 60)
        job = descendants(proc.pid)
        assert {p.name() for p in job} >= {"mpiexec.hydra", "hydra_pmi_proxy"}
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "stopped by SIGINT" in err
        left = wait_gone(job, 15)
        assert left == [], [p.cmdline() for p in left]
    finally:
        kill_all(descendants(proc.pid))
        proc.kill()
