"""The adapter's argv fast path (argparse and the imports it brings cost every rank ~8 ms)
must give exactly what argparse gives, and hand everything else to argparse."""
import ast
import subprocess
import sys

import pytest

from mpilaunch import net
from mpilaunch.errors import UsageError
from mpilaunch.rank import options

# what the launcher renders (mpilaunch --dry-run), plus every flag of the table
SAME = [
    ["--log-dir", ".", "--tail-worker-log", "-1", "--master-port", "8118", "--no-scheduler",
     "--python", "/usr/bin/python3", "--expect-ranks", "4;exact;localhost:4"],
    [],
    ["--log-dir", "/l", "--worker-log-name", "w_{rank}.log", "--tail-worker-log", "none",
     "--master-addr", "10.231.0.1", "--master-port", "0", "--cluster-time-out", "77",
     "--bind-core", '{"scheduler":["0"]}', "--visible-devices", "1,3", "--scheduler-grace",
     "-.5", "--exec", "--no-python", "--module", "--no-port-check", "--restart-count", "2",
     "--max-restarts", "3", "--term-grace", "5", "--stall-timeout", "60"],
    ["--master-port", "1", "--master-port", "2"],          # the last one wins, as in argparse
    ["--log-dir", ""],
]
# argparse's business: abbreviations, '=' spellings, dash-led values, strays, a missing value
OTHER = [
    ["--log", "x"], ["--log-dir=x"], ["--log-dir", "-x"], ["--log-dir", "-1."], ["-h"],
    ["stray"], ["--log-dir"], ["--python", "--module"], ["--log-dir", "-a b"],
]


def _argparse(argv):
    return vars(options._parser().parse_args(argv))


@pytest.mark.parametrize("argv", SAME)
def test_fast_path_equals_argparse(argv):
    fast = options._fast(argv)
    assert fast is not None
    assert vars(fast) == _argparse(argv)


@pytest.mark.parametrize("argv", OTHER)
def test_anything_else_goes_to_argparse(argv):
    assert options._fast(argv) is None


def test_parse_args_same_options_either_way():
    argv = SAME[0] + ["--", "train.py", "--lr", "0.1"]
    fast = options.parse_args(argv, 2)
    assert fast.command == ["train.py", "--lr", "0.1"]
    assert (fast.tail, fast.master_port, fast.no_scheduler) == (None, 8118, True)
    with pytest.raises(UsageError, match="unexpected argument .stray. before"):
        options.parse_args(["stray", "--", "x.py"])
    with pytest.raises(UsageError, match="--log-dir: expected one argument"):
        options.parse_args(["--log-dir", "-x", "--", "x.py"])


HEAVY = ("argparse", "psutil", "socket", "json", "shutil", "dataclasses", "typing", "string",
         "subprocess", "signal", "enum", "ctypes", "re", "queue", "selectors", "locale", "mpi4py")


# Every module of the package a plain rank loads (the launcher's argv, no opt-in feature): each
# costs every rank its load, so one more is a decision to make here, not a side effect.
PLAIN_RANK = {
    "mpilaunch", "mpilaunch.contract", "mpilaunch.errors", "mpilaunch.net", "mpilaunch.pdeathsig",
    "mpilaunch.procstat", "mpilaunch.rank", "mpilaunch.rank.__main__", "mpilaunch.rank.agree",
    "mpilaunch.rank.control", "mpilaunch.rank.descendants", "mpilaunch.rank.firstout",
    "mpilaunch.rank.flags", "mpilaunch.rank.frameworkenv", "mpilaunch.rank.identity",
    "mpilaunch.rank.jobdone", "mpilaunch.rank.logs", "mpilaunch.rank.resilience",
    "mpilaunch.rank.options", "mpilaunch.rank.plan", "mpilaunch.rank.relay", "mpilaunch.rank.runner",
    "mpilaunch.rank.span",
    "mpilaunch.rank.spawn", "mpilaunch.rank.status", "mpilaunch.rank.supervisor"}


@pytest.mark.parametrize("rank, hosts", [(0, 1), (1, 1), (1, 2)])
def test_a_plain_rank_runs_without_the_heavy_imports(tmp_path, rank, hosts):
    """Rank 0 or 1 of 2, no scheduler, the launcher's argv, both ranks on one host or each on
    its own (then the worker gets GLOO_SOCKET_IFNAME, the interface towards rank 0): the whole
    adapter run (parse, plan, rank 0's port check, supervise a worker, reap) loads none of the
    modules that cost every rank milliseconds (docs/ARCHITECTURE.md, start-up), and of the
    package exactly :data:`PLAIN_RANK`: a new import on the plain path shows here (the opt-in
    features, rank/inplace/ and rank/binding/, are imported only by a rank that uses them)."""
    worker = tmp_path / "w.py"
    worker.write_text("import os; print('hi', os.environ.get('GLOO_SOCKET_IFNAME'))\n")
    if hosts == 1:
        where, plan, iface = [], "2;exact;localhost:2", None
    else:
        own = [a for a in net.local_ipv4s() if not net.is_loopback(a)]
        if not own:
            pytest.skip("this machine has no non-loopback IPv4 address")
        where, plan = ["--master-addr", own[0]], f"2;exact;{own[0]}:1,10.231.254.254:1"
        iface = net.route_interface(own[0])
    argv = ["--log-dir", str(tmp_path / "logs"), "--tail-worker-log", "-1", "--master-port",
            str(net.free_port()), *where, "--no-scheduler", "--python", sys.executable,
            "--expect-ranks", plan, "--", str(worker)]
    code = ("import sys; from mpilaunch.rank.__main__ import main; rc = main(%r); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mpilaunch')); "
            "print(rc, sorted(m for m in %r if m in sys.modules))" % (argv, HEAVY))
    local = (str(rank), "2") if hosts == 1 else ("0", "1")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": options.__file__.rsplit("/mpilaunch/", 1)[0],
           "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": local[0], "OMPI_COMM_WORLD_LOCAL_SIZE": local[1]}
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.stdout.splitlines()[-1] == "0 []", out.stdout + out.stderr
    ours = set(ast.literal_eval(out.stdout.splitlines()[-2]))
    assert ours == PLAIN_RANK
    assert (tmp_path / "logs" / f"worker_{rank}.log").read_text() == f"hi {iface}\n"
