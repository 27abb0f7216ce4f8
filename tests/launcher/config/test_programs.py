"""Programs users bring, run for real: MPI programs under --exec, ..."""
import re
import subprocess

import pytest

from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS, OMPI5_MPIRUN as OMPI5
from helpers.ports import free_port

FAIL_AFTER_INIT = """\
from mpi4py import MPI
import sys
if MPI.COMM_WORLD.Get_rank() == 1:
    sys.exit(1)
MPI.COMM_WORLD.Barrier()
"""


def launch(args, tmp_path, timeout=120, **kw):
    # in tmp_path: a launch without --log_dir writes its event record and logs to the cwd
    return subprocess.run(mpilaunch_argv(*args), env=clean_env(TMPDIR=tmp_path), cwd=kw.pop("cwd", tmp_path),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=kw.pop("stdin", None if "input" in kw else subprocess.DEVNULL), **kw)


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_exec_failure_is_named_from_open_mpis_own_report(mpirun, tmp_path):
    # was: "no rank reported a failure" while prterun named the process
    script = tmp_path / "fail.py"
    script.write_text(FAIL_AFTER_INIT)
    proc = launch(["--mpirun", mpirun, "--exec", "-np", "2", "--master_port", free_port(), str(script)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    summary = proc.stderr[proc.stderr.index("mpilaunch: job failed"):]
    if mpirun == OMPI5:
        assert "root cause: rank 1 (process) on host " in summary and ": exit code 1" in summary, summary
        assert "error: the process called MPI_Abort" in summary
    else:
        # Open MPI 4.1 with mpi4py's (5.x) library prints no process name: nothing to parse
        assert "no rank reported a failure" in summary


# ---------------------------------------------------------------- stdin

CPI = """\
from mpi4py import MPI
import math
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
while True:
    n = None
    if rank == 0:
        try:
            n = int(input())
        except (EOFError, ValueError):
            n = 0
    n = comm.bcast(n, root=0)
    if n == 0:
        break
    h = 1.0 / n
    s = sum(4.0 / (1.0 + (h * (i + 0.5)) ** 2) for i in range(rank, n, size))
    pi = comm.reduce(s * h, op=MPI.SUM, root=0)
    if rank == 0:
        print("pi is approximately %.16f, error is %.16f" % (pi, abs(pi - math.pi)), flush=True)
"""


@pytest.mark.parametrize("mode", [["--exec"], []], ids=["exec", "adapter"])
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_stdin_reaches_rank0_and_closed_or_null_stdin_never_hangs(mpirun, mode, tmp_path):
    # was: mpirun got /dev/null; on 5.x rank 0 then waited forever on a pipe without an end
    script = tmp_path / "cpi.py"
    script.write_text(CPI)
    args = ["--mpirun", mpirun, *(mode or ["--master_port", free_port()]), "-np", "2", str(script)]
    proc = launch(args, tmp_path, timeout=60, input="1000\n0\n")
    assert proc.returncode == 0, proc.stderr
    assert "pi is approximately 3.14159" in proc.stdout, proc.stdout
    for stdin in (subprocess.DEVNULL, None):   # /dev/null, and fd 0 closed
        kw = {"stdin": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL,
                                                          "preexec_fn": lambda: __import__("os").close(0)}
        proc = launch(args, tmp_path, timeout=60, **kw)
        assert proc.returncode == 0, proc.stderr
        assert "pi is" not in proc.stdout


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_stdin_none_and_all(mpirun, tmp_path):
    script = tmp_path / "rd.py"
    script.write_text("import os, sys\nprint('R%s:%r' % (os.environ['RANK'], sys.stdin.read()))\n")
    proc = launch(["--mpirun", mpirun, "--stdin", "none", "-np", "2", "--no-scheduler",
                   "--master_port", free_port(), str(script)], tmp_path, timeout=60, input="hello\n")
    assert proc.returncode == 0, proc.stderr
    assert "R0:''" in proc.stdout and "R1:''" in proc.stdout
    proc = launch(["--mpirun", mpirun, "--dry-run", "--stdin", "all", "-np", "2", str(script)], tmp_path)
    assert " --stdin all " in proc.stdout


# ---------------------------------------------------------------- -m MODULE (item 2)

@pytest.mark.parametrize("mode", [["--exec"], []], ids=["exec", "adapter"])
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_module_runs_mpi4py_bench(mpirun, mode, tmp_path):
    # was: "unrecognized arguments: -m"; with "--", the script became <cwd>/-m
    for args in (["-m", "mpi4py.bench", "helloworld"], ["--", "-m", "mpi4py.bench", "helloworld"]):
        port = [] if mode else ["--master_port", free_port()]   # never rely on 8118 being free
        proc = launch(["--mpirun", mpirun, *mode, *port, "-np", "2", "--log_dir", str(tmp_path / "logs"),
                       *args], tmp_path, timeout=90)
        assert proc.returncode == 0, proc.stderr
        for r in (0, 1):
            assert f"Hello, World! I am process {r} of 2" in proc.stdout, proc.stdout


# ---------------------------------------------------------------- --exec and the port (item 3)

@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_exec_does_not_need_the_default_port(mpirun, tmp_path):
    # was: 8118 held -> every --exec job failed (prterun assertion, exit 134); --master_port 0
    # was refused under --exec although the message recommended it
    import socket
    script = tmp_path / "hello.py"
    script.write_text("from mpi4py import MPI\nimport os\n"
                      "print('OK', MPI.COMM_WORLD.Get_rank(), os.environ['MASTER_PORT'])\n")
    held = socket.socket()
    try:
        held.bind(("", 8118))   # may fail: then something else holds 8118, as good for the test
        held.listen()
    except OSError:
        pass
    try:
        for extra in ([], ["--master_port", "0"]):
            proc = launch(["--mpirun", mpirun, "--exec", "-np", "2", *extra, str(script)], tmp_path, timeout=90)
            assert proc.returncode == 0, proc.stderr
            # count "OK" (not "OK "): under --exec Open MPI 4.1 may tear the two ranks' lines
            assert proc.stdout.count("OK") == 2 and " 8118" not in proc.stdout
        # a port the user gave is still checked, with a clean message (a port this test holds:
        # whoever held 8118 above may have let it go meanwhile)
        mine = socket.socket()
        mine.bind(("", 0))
        mine.listen()
        port = str(mine.getsockname()[1])
        proc = launch(["--mpirun", mpirun, "--exec", "-np", "2", "--master_port", port, str(script)],
                      tmp_path, timeout=90)
        mine.close()
        assert proc.returncode == 2 and port in proc.stderr and "in use" in proc.stderr
    finally:
        held.close()


# ---------------------------------------------------------------- the scheduler (items 4, 6)

def _ranks_of(console, text):
    """The ranks a console shows printing the line ``text`` (``[rank0] text``, ``[rank0,1] text``)."""
    found = re.findall(r"^\[rank([\d,]+)\] " + re.escape(text) + "$", console, re.M)
    return sorted(int(r) for group in found for r in group.split(","))


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_mpi_program_without_exec_works_on_one_host(mpirun, tmp_path):
    # was: rank 0's scheduler copy called MPI_Init as rank 0 too (hang, or exit 137 after 21 s)
    script = tmp_path / "ring.py"
    script.write_text("from mpi4py import MPI\nc = MPI.COMM_WORLD\n"
                      "print('SUM', c.allreduce(c.Get_rank() + 1))\n")
    proc = launch(["--mpirun", mpirun, "-np", "2", "--master_port", free_port(),
                   "--log_dir", str(tmp_path / "logs"), str(script)], tmp_path, timeout=90)
    assert proc.returncode == 0, proc.stderr
    # both ranks' line: shown once as [rank0,1] (docs/LOGS.md), or per rank if far apart
    assert _ranks_of(proc.stdout, "SUM 3") == [0, 1], proc.stdout
    assert sorted(p.name for p in (tmp_path / "logs").iterdir() if not p.name.startswith(".")) == ["events.jsonl", "worker_0.log", "worker_1.log"]
    # where the adapter itself would initialise MPI: refused, naming --exec
    proc = launch(["--mpirun", mpirun, "-np", "2", "--master_port", "0", str(script)], tmp_path)
    assert proc.returncode == 2 and "--exec" in proc.stderr and "mpi4py" in proc.stderr


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_plain_and_pytorch_scripts_get_no_scheduler_copy(mpirun, tmp_path):
    # was: a plain script ran a third time on rank 0; PyTorch died with EADDRINUSE
    plain = tmp_path / "plain.py"
    plain.write_text("import os\nopen(os.path.join(%r, 'run-%%d' %% os.getpid()), 'w').close()\n"
                     % str(tmp_path))
    proc = launch(["--mpirun", mpirun, "-np", "2", "--master_port", free_port(),
                   "--log_dir", str(tmp_path / "logs"), str(plain)], tmp_path, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert len(list(tmp_path.glob("run-*"))) == 2
    assert not (tmp_path / "logs" / "scheduler.log").exists()
    ddp = tmp_path / "ddp.py"
    ddp.write_text("import torch, torch.distributed as dist\n"
                   "dist.init_process_group('gloo')\n"
                   "t = torch.ones(1) * (dist.get_rank() + 1)\ndist.all_reduce(t)\n"
                   "print('DDP', int(t.item()))\ndist.destroy_process_group()\n")
    proc = launch(["--mpirun", mpirun, "-np", "2", "--master_port", free_port(), str(ddp)],
                  tmp_path, timeout=120)     # the default log dir is the cwd
    assert proc.returncode == 0, proc.stderr
    # both ranks' line: shown once as [rank0,1] (docs/LOGS.md), or per rank if far apart
    assert _ranks_of(proc.stdout, "DDP 3") == [0, 1], proc.stdout


def test_summary_names_the_scheduler_fix(tmp_path):
    # a wrong guess either way names the flag that fixes it
    from mpilaunch.output.summary import Event, scheduler_hint
    sched = Event.from_json({"rank": 0, "host": "h", "role": "scheduler", "event": "exit", "code": 1,
                             "cause": "self", "tail": ["OSError: [Errno 98] Address already in use"]})
    assert "--no-scheduler" in scheduler_hint(sched, (True, "MS_WORKER_NUM is set"))
    worker = Event.from_json({"rank": 1, "host": "h", "role": "worker", "event": "exit", "code": 1,
                              "cause": "self", "tail": ["RuntimeError: mindspore cluster timed out"]})
    assert "--scheduler" in scheduler_hint(worker, (False, "run.sh does not import mindspore"))
    assert scheduler_hint(worker, (False, "--no-scheduler")) is None
