"""The launcher's import budget, as tests/rank/test_options.py holds the rank side's: a plain
``mpilaunch -np 4 script.py`` loads, up to the starter's Popen, exactly :data:`PLAIN_LAUNCH` of
the package and none of :data:`HEAVY`; the opt-in features (host discovery, the host checks,
the ssh preflight, the report, /metrics, the restarts' machinery, the monitor's board of a job
shorter than one monitor interval) are never loaded, and the stacks server only once the
starter runs. Every module here costs every launch its load (docs/ARCHITECTURE.md, start-up),
so one more is a decision to make here, not a side effect of an import at a module's top."""
import ast
import os
import shutil
import subprocess
import sys
import time

import pytest

from helpers import REPO, mpis
from helpers.ports import free_port

# The launch under test runs in its own interpreter, started with -S (no site, no .pth: what
# this sandbox's site-packages preloads would hide a module the launch imports); what it
# imports is read by an audit hook (sys.addaudithook) at the starter's Popen and at its end.
PROBE = r"""
import gc, sys
BASE = set(sys.modules)
SCRIPT = sys.argv[1]
at_popen = []
collections = lambda: sum(s["collections"] for s in gc.get_stats())

def hook(event, args):
    if event == "subprocess.Popen" and not at_popen and SCRIPT in list(args[1] or ()):
        at_popen.append(sorted(set(sys.modules) - BASE))
        at_popen.append((collections() - before, gc.isenabled()))

sys.addaudithook(hook)
from mpilaunch.cli import main
before = collections()
rc = main(sys.argv[2:])
sys.stdout.flush()
print("\nPROBE", repr((rc, at_popen[0] if at_popen else None, sorted(set(sys.modules) - BASE))))
print("GC", repr((at_popen[1] if at_popen else None, gc.isenabled(), gc.get_freeze_count())))
"""

# Every module of the package a plain launch has loaded when it starts mpirun.
PLAIN_LAUNCH = {
    "mpilaunch", "mpilaunch.attempts", "mpilaunch.attempts.loop",
    "mpilaunch.attempts.monitoring", "mpilaunch.attempts.nextattempt",
    "mpilaunch.backends", "mpilaunch.backends.base",
    "mpilaunch.backends.openmpi", "mpilaunch.backends.placement", "mpilaunch.backends.rankcmd",
    "mpilaunch.cli", "mpilaunch.config", "mpilaunch.config.allocation", "mpilaunch.config.broadcast",
    "mpilaunch.config.helptext", "mpilaunch.config.hostfile", "mpilaunch.config.launchconfig",
    "mpilaunch.config.monitoring",
    "mpilaunch.config.mpi", "mpilaunch.config.mpiargs", "mpilaunch.config.msrun",
    "mpilaunch.config.options", "mpilaunch.config.preflight", "mpilaunch.config.programs",
    "mpilaunch.config.rankcheck", "mpilaunch.config.resilience", "mpilaunch.config.sshconfig",
    "mpilaunch.config.torchrun", "mpilaunch.config.tuneimport", "mpilaunch.contract",
    "mpilaunch.errors", "mpilaunch.net", "mpilaunch.output", "mpilaunch.output.events",
    "mpilaunch.output.jsonline",
    "mpilaunch.output.outcome", "mpilaunch.output.summary",
    "mpilaunch.pdeathsig", "mpilaunch.procstat", "mpilaunch.rank", "mpilaunch.rank.control",
    "mpilaunch.rank.flags", "mpilaunch.rank.frameworkenv", "mpilaunch.rank.identity",
    "mpilaunch.rank.logs", "mpilaunch.rank.status", "mpilaunch.run", "mpilaunch.rundir",
    "mpilaunch.supervise", "mpilaunch.supervise.attempt", "mpilaunch.supervise.control",
    "mpilaunch.supervise.ending", "mpilaunch.supervise.relays",
    "mpilaunch.supervise.starter", "mpilaunch.supervise.stopping", "mpilaunch.supervise.usersignals"}

# The monitor's board, fed the ranks' samples: on by default where py-spy is beside the ranks'
# Python (config/monitoring.py), but made by the first sample (attempts/monitoring.py), one
# monitor interval after the adapters start: never before mpirun starts, and not at all in a
# launch that ends sooner.
MONITOR = {"mpilaunch.monitor", "mpilaunch.monitor.board", "mpilaunch.monitor.model",
           "mpilaunch.monitor.straggler"}

# Loaded by the plain launch only once mpirun runs: `mpilaunch stacks LOG_DIR`'s listener, and
# the console's collapsing of the ranks' identical lines (on by default: docs/LOGS.md).
STACKS_SERVER = {"mpilaunch.stacks", "mpilaunch.stacks.server"}
AFTER_POPEN = STACKS_SERVER | {"mpilaunch.output.console"}

# Never before the Popen of a plain launch: each is milliseconds of every launch, or a feature
# the launch did not ask for (secrets/hmac/hashlib: OpenSSL's load; queue: heapq; dataclasses:
# inspect, ast, dis and tokenize, ~5 ms, and ~0.5 ms more for each class made with it; resource:
# os.sysconf reads the open-file limit a launch of a few ranks checks; tempfile and shutil: random,
# bz2, lzma and zlib, ~3.5 ms, for what mpilaunch/rundir.py and contract.which do in a few lines;
# socket and array: socket.py's enums, ~1.3 ms, where the control channel uses _socket itself;
# json: its decoder, scanner and their patterns, ~1 ms, where the event record encodes with
# _json's encoder and only the ranks' status lines, after the Popen, need the decoder).
HEAVY = ("psutil", "prometheus_client", "http", "http.server", "socketserver", "hmac", "hashlib",
         "secrets", "ssl", "queue", "urllib", "email", "asyncio", "concurrent", "logging", "uuid",
         "ctypes", "zipfile", "importlib.resources", "pathlib", "platform", "sysconfig",
         "dataclasses", "inspect", "ast", "dis", "tokenize", "resource", "tempfile", "shutil",
         "random", "bz2", "lzma", "socket", "array", "json",
         "mpi4py", "torch", "numpy", "hostlist")

# Never in a plain launch at all: the opt-in features' modules (restarts, host discovery, ...).
NEVER = ("mpilaunch.attempts.discovery", "mpilaunch.attempts.health", "mpilaunch.attempts.shrink",
         "mpilaunch.attempts.hostsource", "mpilaunch.attempts.restart", "mpilaunch.attempts.progress",
         "mpilaunch.supervise.leftovers",
         "mpilaunch.ssh", "mpilaunch.check", "mpilaunch.report", "mpilaunch.job",
         "mpilaunch.stacks.command", "mpilaunch.stacks.verdict", "mpilaunch.monitor.metrics",
         "mpilaunch.rank.binding",
         "psutil", "prometheus_client", "http.server", "hmac", "secrets")


def plain_launch(tmp_path, mpirun, repo=REPO):
    """``mpilaunch --mpirun MPIRUN -np 4 --master_port PORT w.py`` in ``tmp_path`` -> (its exit
    status, the modules it had loaded at the starter's Popen, those at its end, its seconds)."""
    worker = tmp_path / "w.py"
    worker.write_text("import os; print('rank', os.environ['OMPI_COMM_WORLD_RANK'])\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "PYTHONPATH": repo,
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    # a port of its own: another test's MindSpore job may hold the default one (8118)
    out = subprocess.run([sys.executable, "-S", "-c", PROBE, str(worker), "--mpirun", mpirun,
                          "-np", "4", "--master_port", free_port(), str(worker)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    took = time.monotonic() - start
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")]
    assert lines, out.stdout + out.stderr
    rc, at_popen, at_end = ast.literal_eval(lines[-1][len("PROBE "):])
    assert at_popen is not None, "no Popen of mpirun seen\n" + out.stderr
    gc_line = [ln for ln in out.stdout.splitlines() if ln.startswith("GC ")]
    (tmp_path / "gc.txt").write_text(gc_line[-1][len("GC "):])
    for r in range(4):
        assert (tmp_path / f"worker_{r}.log").read_text() == f"rank {r}\n", out.stderr
    return rc, set(at_popen), set(at_end), took


def ours(modules):
    return {m for m in modules if m.split(".")[0] == "mpilaunch"}


@pytest.mark.parametrize("mpirun", mpis.MPIRUNS)
def test_a_plain_launch_loads_only_what_it_uses(tmp_path, mpirun):
    rc, at_popen, at_end, took = plain_launch(tmp_path, mpirun)
    assert rc == 0
    from mpilaunch.config.options import DEFAULT_MONITOR_INTERVAL

    heavy = sorted(m for m in HEAVY if m in at_popen)
    assert heavy == [], f"heavy modules before mpirun starts: {heavy}"
    new = sorted(ours(at_popen) - PLAIN_LAUNCH)
    assert new == [], f"new on the launch's path (decide here, or import it where it is used): {new}"
    gone = sorted(PLAIN_LAUNCH - ours(at_popen))
    assert gone == [], f"no longer loaded: take them out of the set: {gone}"
    # the monitor's board (on here when py-spy is beside this Python) waits for a first sample,
    # which no adapter sends before one interval: a launch that took less never loads it
    board = MONITOR if took >= DEFAULT_MONITOR_INTERVAL else set()
    assert sorted(ours(at_end) - ours(at_popen) - board) == sorted(AFTER_POPEN)
    never = sorted(m for m in NEVER if m in at_end)
    assert never == [], f"opt-in features loaded by a plain launch: {never}"
    # nor, once mpirun runs, what costs the launcher CPU while the ranks start on the same
    # cores: socket.py (the stacks server listens through _socket) and the json package (the
    # record's lines and the ranks' status lines go through _json's encoder and scanner)
    late = sorted(m for m in ("socket", "json", "json.decoder", "json.encoder") if m in at_end)
    assert late == [], f"loaded while the ranks start: {late}"


@pytest.mark.parametrize("mpirun", mpis.MPIRUNS[:1])
def test_the_collector_is_off_from_the_command_to_mpiruns_start_and_on_after(tmp_path, mpirun):
    """cli.main turns the garbage collector off (the start-up's passes over the imports cost
    ~5 ms of every launch) and the starter turns it on once mpirun runs, the start-up's objects
    frozen out of later collections (docs/ARCHITECTURE.md, start-up)."""
    rc, _, _, _ = plain_launch(tmp_path, mpirun)
    assert rc == 0
    (collections, on_at_popen), on_at_end, frozen = ast.literal_eval((tmp_path / "gc.txt").read_text())
    assert (collections, on_at_popen) == (0, False)   # none between the command and the Popen
    assert on_at_end and frozen > 0


def test_the_budget_fails_on_a_planted_import_of_the_stacks_server(tmp_path):
    """The stacks server imported at the top of run.py (as a module every launch loads would
    import it) is seen before the Popen: the test above would fail."""
    copy = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "mpilaunch"), copy / "mpilaunch",
                    ignore=shutil.ignore_patterns("__pycache__"))
    run_py = copy / "mpilaunch" / "run.py"
    text = run_py.read_text()
    run_py.write_text(text.replace("\nimport os\n", "\nimport os\nfrom mpilaunch.stacks import server\n", 1))
    launch = tmp_path / "launch"
    launch.mkdir()
    rc, at_popen, _, _ = plain_launch(launch, mpis.OMPI5_MPIRUN if not mpis.OMPI5.missing()
                                      else mpis.OMPI4_MPIRUN, repo=str(copy))
    assert rc == 0
    assert STACKS_SERVER <= ours(at_popen) - PLAIN_LAUNCH
