"""Real launches through mpilaunch and real mpirun (Open MPI 5 wheel and Debian's 4.1)."""
import json
import os
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv, run
from helpers.mpis import MPIRUNS
from helpers.ports import free_port
from helpers.procs import alive, descendants, kill_all, wait_for, wait_gone

DUMP = """\
import json, os, sys
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
out = os.environ["DUMP_DIR"]
rank = os.environ["RANK_ID"]
with open(os.path.join(out, "rank%s.json" % rank), "w") as fh:
    json.dump(dict(os.environ), fh)
print("hello from rank", rank, flush=True)
"""


@pytest.fixture
def dump_script(tmp_path):
    path = tmp_path / "dump.py"
    path.write_text(DUMP)
    return str(path)


def read_dumps(directory, n):
    out = {}
    for r in range(n):
        with open(os.path.join(directory, f"rank{r}.json")) as fh:
            out[r] = json.load(fh)
    return out


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_four_ranks_get_identity_and_broadcast(mpirun, tmp_path, dump_script):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = clean_env(DUMP_DIR=tmp_path, TMPDIR=tmpdir, MA_JOB_NAME="job-1", MA_SPACES="a b  c",
                    AWS_SECRET_ACCESS_KEY="s3cr3t-value", S3_ENDPOINT="http://s3.local:9000")
    proc = run(["--mpirun", mpirun, "--master_port", free_port(), "-np", "4", "--log_dir", str(tmp_path / "logs"),
                "--no-scheduler", dump_script], env=env)
    assert proc.returncode == 0, proc.stderr
    ranks = read_dumps(tmp_path, 4)
    for r, seen in ranks.items():
        assert seen["RANK_ID"] == str(r) and seen["RANK"] == str(r)
        assert seen["RANK_SIZE"] == "4" and seen["WORLD_SIZE"] == "4"
        assert seen["MS_ROLE"] == "MS_WORKER" and seen["MS_WORKER_NUM"] == "4"
        assert seen["MA_JOB_NAME"] == "job-1"
        assert seen["MA_SPACES"] == "a b  c"
        assert seen["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value"
        assert seen["S3_ENDPOINT"] == "http://s3.local:9000"
        assert seen["PATH"] == env["PATH"]
    assert sorted(int(r["LOCAL_RANK"]) for r in ranks.values()) == [0, 1, 2, 3]
    # console: every rank's line, prefixed; secrets nowhere in our output
    for r in range(4):
        assert f"[rank{r}] hello from rank {r}" in proc.stdout
    assert "s3cr3t-value" not in proc.stdout + proc.stderr
    # logs laid out as msrun lays them out
    assert sorted(n for n in os.listdir(tmp_path / "logs") if not n.startswith(".")) == ["events.jsonl"] + [f"worker_{r}.log" for r in range(4)]
    # the run directory (hostfile, tune file) is gone
    assert list(tmpdir.iterdir()) == []


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_kept_tune_file_is_private_and_holds_no_secret(mpirun, tmp_path, dump_script):
    tune_dir = tmp_path / "private"
    tune_dir.mkdir(mode=0o700)
    tune = tune_dir / "tune.env"
    env = clean_env(DUMP_DIR=tmp_path, MA_A="1", CRED_VALUE="zzz-secret", TUNE_ENV_FILE=tune)
    proc = run(["--mpirun", mpirun, "--master_port", free_port(), "-np", "2", "--keep-tune-file", "--no-scheduler",
                "--log_dir", str(tmp_path / "logs"), dump_script], env=env)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(tune).st_mode) == 0o600
    text = tune.read_text()
    assert "-x MA_A=1\n" in text
    assert "zzz-secret" not in text and "CRED_VALUE" not in text
    assert read_dumps(tmp_path, 2)[1]["CRED_VALUE"] == "zzz-secret"


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_failing_rank_exit_code_and_summary(mpirun, tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ.get('MS_ROLE') == 'MS_SCHED': sys.exit(0)\n"
        "if os.environ['RANK_ID'] == '2':\n"
        "    print('about to fail', flush=True); sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    proc = run(["--mpirun", mpirun, "--master_port", free_port(), "-np", "4", "--log_dir", str(tmp_path / "logs"), str(script)], timeout=90)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert elapsed < 30, f"a failed rank should end the job within seconds, took {elapsed:.1f}s"
    assert "root cause: rank 2 (worker) on host" in proc.stderr
    assert "exit code 3" in proc.stderr
    assert f"log: {tmp_path / 'logs' / 'worker_2.log'}" in proc.stderr
    assert "| about to fail" in proc.stderr


@pytest.mark.parametrize("mpirun", MPIRUNS)
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_interrupt_ends_everything(mpirun, how, tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text("import os, time\nopen(os.path.join(os.environ['OUT'], 'up%s' % os.environ['RANK_ID']), 'w').close()\ntime.sleep(120)\n")
    env = clean_env(OUT=tmp_path)
    launcher = subprocess.Popen(mpilaunch_argv("--mpirun", mpirun, "--master_port", free_port(), "-np", "2", "--no-scheduler",
                                               "--log_dir", str(tmp_path / "logs"), str(script)),
                                env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((tmp_path / f"up{r}").exists() for r in range(2)), 60)
        job = descendants(launcher.pid)
        assert len(job) >= 5  # mpirun, 2 adapters, 2 workers
        launcher.send_signal(getattr(signal, how))
        out, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 128 + getattr(signal, how), err
        assert wait_gone(job, 15) == []
    finally:
        kill_all(descendants(launcher.pid))
        launcher.kill()


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_launcher_sigkilled_leaves_no_orphans(mpirun, tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text("import os, time\nopen(os.path.join(os.environ['OUT'], 'up%s' % os.environ['RANK_ID']), 'w').close()\ntime.sleep(120)\n")
    launcher = subprocess.Popen(mpilaunch_argv("--mpirun", mpirun, "--master_port", free_port(), "-np", "2", "--no-scheduler",
                                               "--log_dir", str(tmp_path / "logs"), str(script)),
                                env=clean_env(OUT=tmp_path), cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    job = []
    try:
        assert wait_for(lambda: all((tmp_path / f"up{r}").exists() for r in range(2)), 60)
        job = descendants(launcher.pid)
        launcher.kill()
        launcher.wait()
        left = wait_gone(job, 20)
        assert left == [], [p.cmdline() for p in left]
    finally:
        kill_all(job)


def test_readme_example_runs(tmp_path):
    """The README's main job, as written there (between the quick-start markers), with a free
    --master_port put first: the session holds the default busy (tests/conftest.py)."""
    with open(os.path.join(REPO, "README.md")) as fh:
        text = fh.read()
    block = text.split("<!-- main-job -->", 1)[1].split("<!-- /main-job -->", 1)[0]
    import shlex
    line = [l for l in block.splitlines() if "mpilaunch " in l][0]
    command = line.split("&&")[-1].strip()
    assert command.startswith("mpilaunch ")
    args = ["--master_port", "0", *shlex.split(command)[1:]]
    proc = run(args, cwd=REPO, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    for r in range(4):
        assert f"[rank{r}] hello rank={r} size=4 " in proc.stdout, proc.stdout


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_exec_mode_mpi_program_failing_after_mpi_init_ends_the_job(mpirun, tmp_path):
    """--exec: the script is an MPI program. Rank 1 exits 3 after MPI_Init while the others wait
    in a barrier; under mpi4py's runner that aborts the job instead of hanging in MPI_Finalize."""
    script = tmp_path / "mpiprog.py"
    script.write_text(
        "import os, sys\n"
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "assert os.environ['RANK_ID'] == str(comm.Get_rank())\n"
        "if comm.Get_rank() == 1:\n"
        "    sys.exit(3)\n"
        "comm.Barrier()\n"
    )
    start = time.monotonic()
    proc = run(["--mpirun", mpirun, "--master_port", free_port(), "-np", "3", "--exec", str(script)], env=clean_env(), timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert took < 30, f"took {took:.1f}s"
