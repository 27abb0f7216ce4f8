"""What makes a launch cost the same on 32 hosts as bare mpirun, decided before anything starts
(no process, no ssh): rank 0's address known to the launcher in both placements (so no adapter
initialises MPI), no ssh preflight before an Open MPI launch but BatchMode and a connect time-out
on mpirun's own ssh, and the ssh checks run after a failed daemon start only."""
import os
import sys

import pytest

from helpers import EXAMPLES
from mpilaunch import net, run
from mpilaunch.config import launchconfig, options
from mpilaunch.attempts import nextattempt
from mpilaunch.config import hostfile as hf
from mpilaunch.backends.hydra import Hydra
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.check.results import FAIL, OK, CheckResult
from mpilaunch.config.mpi import MPICH, OMPI5, MpiInfo
from mpilaunch.output.summary import Collector, Event

REMOTE = ("10.231.9.11", "10.231.9.12", "10.231.9.13")   # no such hosts: nothing is contacted
SCRIPT = os.path.join(EXAMPLES, "exit_at_once.py")


def _cfg(*argv, env=None):
    args = options.parser(options.RUN).parse_args(list(argv) + [SCRIPT])
    cfg = launchconfig.build(args, dict(env or {}, PATH=os.environ.get("PATH", "")))
    return args, cfg


def _attempt0(*argv):
    args, cfg = _cfg(*argv)
    return nextattempt.attempt_cfg(cfg, 0)


def test_rank0_address_for_a_launcher_outside_the_hostfile():
    hosts = tuple(hf.Host(a, 1) for a in REMOTE)
    assert net.rank0_address(hosts) == REMOTE[0]               # rank 0's host, by its address
    named = (hf.Host("node-a", 1),) + hosts[1:]
    assert net.rank0_address(named) is None                     # a name: no look-up here
    assert net.rank0_address(named, {"node-a": "10.0.0.7"}.get) == "10.0.0.7"   # Slurm's NodeAddr
    assert net.rank0_address(named, {"node-a": "node-a"}.get) is None
    assert net.rank0_address(()) is None


def test_outside_the_hostfile_the_adapters_get_rank0s_address_and_the_plan():
    cfg = _attempt0("-H", ",".join(f"{a}:1" for a in REMOTE), "--no-scheduler")
    assert cfg.master_addr == REMOTE[0]
    assert any(a.startswith("3;exact;") for a in cfg.rank_extra)     # node index from the plan
    # a placement of the user's own: rank 0 may be anywhere; the ranks agree
    cfg = _attempt0("-H", ",".join(f"{a}:1" for a in REMOTE), "--extra-args", "--map-by node")
    assert not cfg.master_addr
    cfg = _attempt0("-H", "node-a:1,node-b:1")
    assert not cfg.master_addr
    cfg = _attempt0("-H", ",".join(f"{a}:1" for a in REMOTE), "--master_addr", "10.231.9.99")
    assert cfg.master_addr == "10.231.9.99"                     # the user's wins


def test_an_open_mpi_launch_gets_no_preflight_but_safe_ssh(monkeypatch):
    ran = []
    monkeypatch.setattr(run, "preflight_fails", lambda cfg, mux=None: ran.append(mux) or False)
    args, cfg = _cfg("-H", ",".join(f"{a}:1" for a in REMOTE), "--ssh-args", "-F /x/cfg")
    backend = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
    out = run._ssh_checks(cfg, backend, "/tmp/mpilaunch-xyz")
    assert ran == []
    assert out.ssh_extra == ("-F", "/x/cfg", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
    assert run.start_checks(args, backend, cfg) is cfg          # what the checks use afterwards
    # Hydra, and ssh options of the user's own in the MCA args, keep the preflight first
    hydra = Hydra(MpiInfo("/x/mpiexec.hydra", (5, 0, 2), MPICH))
    assert run._ssh_checks(cfg, hydra, "/tmp/mpilaunch-xyz").ssh_extra == cfg.ssh_extra
    assert run.start_checks(args, hydra, cfg) is None
    args, mca = _cfg("-H", ",".join(f"{a}:1" for a in REMOTE), "--mca-args", "-mca plm_rsh_args '-p 2222'")
    assert run._ssh_checks(mca, OpenMpi(backend.mpi), "/tmp/x").ssh_extra == mca.ssh_extra
    assert run.start_checks(args, backend, mca) is None
    assert ran == ["/tmp/mpilaunch-xyz/cm-%C", None]
    # no ssh check at all: --no-preflight, or every host here
    args, cfg = _cfg("-H", ",".join(f"{a}:1" for a in REMOTE), "--no-preflight")
    assert run.start_checks(args, backend, cfg) is None
    args, cfg = _cfg("-H", "localhost:2")
    assert run.start_checks(args, backend, cfg) is None


def test_tree_spawn_past_the_radix_gets_no_ssh_option_open_mpi_would_cut_at_its_equals_sign():
    """Tree spawn hands mpirun's ssh options to the daemons, cut at the first '=': past 64 hosts
    (Open MPI's routing radix) daemons start daemons and "-o BatchMode" fails every launch."""
    backend = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
    many = ",".join(f"10.231.9.{i}:1" for i in range(1, 66))   # 65 hosts
    tree = ("--mca-args", "-mca pml ob1")
    args, cfg = _cfg("-H", many, "--ssh-args", "-F /x/cfg", *tree)
    out = run._ssh_checks(cfg, backend, "/tmp/mpilaunch-xyz")
    assert out.ssh_extra == ("-F", "/x/cfg") and run.start_checks(args, backend, cfg) is cfg
    # at the radix (every daemon mpirun's own child) and over flat ssh: the start options stay
    for argv in (("-H", ",".join(f"10.231.9.{i}:1" for i in range(1, 65)), *tree), ("-H", many)):
        _, cfg = _cfg(*argv, "--ssh-args", "-F /x/cfg")
        assert run._ssh_checks(cfg, backend, "/tmp/x").ssh_extra[2:] == (
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")


def test_an_open_mpi_launch_does_not_import_the_checks():
    import subprocess

    code = ("import sys; from mpilaunch import run; from mpilaunch.config import launchconfig, options; "
            "from mpilaunch.backends.openmpi import OpenMpi; from mpilaunch.config.mpi import MpiInfo, OMPI5; "
            "a = options.parser(options.RUN).parse_args(['-H', '10.231.9.11:1,10.231.9.12:1', %r]); "
            "c = launchconfig.build(a, {}); run._ssh_checks(c, OpenMpi(MpiInfo('/x', (5, 0, 11), OMPI5)), '/tmp'); "
            "print('mpilaunch.check' in sys.modules)") % SCRIPT
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


START_FAILED = ("A daemon failed to report back after being spawned.\n  Local host: h1\n"
                "  Remote host:   10.231.9.12\n  Daemon exit status: 255\n")


@pytest.mark.parametrize("text,events,checked", [
    (START_FAILED, False, True),
    ("ORTE was unable to reliably start one or more daemons.\n", False, True),
    (START_FAILED, True, False),              # ranks had reported: a host lost mid-job
    ("PRTE has lost communication with a remote daemon.\n", False, False),
    ("", False, False),
])
def test_the_ssh_checks_run_only_after_a_failed_daemon_start(monkeypatch, text, events, checked):
    from mpilaunch import check

    calls = []
    bad = CheckResult("10.231.9.12", "10.231.9.12", "ssh-port", FAIL, "ssh port 22 closed")
    monkeypatch.setattr(check, "run_checks", lambda cfg, timeout: calls.append(cfg) or [
        CheckResult("", "", "slots", OK), bad, CheckResult("10.231.9.13", "", "ssh", OK)])
    backend = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))
    _, cfg = _cfg("-H", ",".join(f"{a}:1" for a in REMOTE))
    plan = backend.plan(cfg, {}, "/tmp/mpilaunch-xyz", 1000)
    c = Collector(backend)
    c.feed_text(text, "stdout")
    if events:
        c.ranks_seen.add(0)
        c.feed_status(Event(0, "h1", "worker", "exit", None, 15, "terminated", None, [], 1.0))
    backend.after(plan._replace(start_checks="the launch config"), c, 255)
    assert calls == (["the launch config"] if checked else [])
    assert c.not_started == ([bad] if checked else [])
    if checked:
        assert "10.231.9.12" in c.unreachable and c.lost_hosts()[0] == "10.231.9.12"
    calls.clear()                           # checked before the start, or not at all
    c = Collector(backend)
    c.feed_text(text, "stdout")
    backend.after(plan, c, 255)
    assert calls == []


def test_flat_ssh_gets_the_open_files_it_needs_or_one_line_saying_so(monkeypatch):
    import resource

    from mpilaunch.errors import UsageError

    limits = {}
    monkeypatch.setattr(resource, "getrlimit", lambda what: limits["nofile"])
    monkeypatch.setattr(resource, "setrlimit", lambda what, value: limits.__setitem__("set", value))
    _, flat = _cfg("-H", ",".join(f"{a}:1" for a in REMOTE))          # ModelArts' MCA default
    need = run.FILES_BASE + 1000 + 4 * 2
    limits["nofile"] = (1024, 1048576)
    run.open_file_limit(flat, 1000, 2)
    assert limits.pop("set") == (2 * need, 1048576)                   # raised, but not to the hard limit
    limits["nofile"] = (1024, 1500)
    run.open_file_limit(flat, 1000, 2)
    assert limits.pop("set") == (1500, 1500)
    limits["nofile"] = (4096, 4096)
    run.open_file_limit(flat, 1000, 2)                                # enough: untouched
    assert "set" not in limits
    limits["nofile"] = (1024, 1024)
    with pytest.raises(UsageError) as err:
        run.open_file_limit(flat, 1000, 2)
    assert str(err.value) == (
        f"ulimit -n 1024 (hard 1024): too low for flat ssh to 1000 hosts (mpirun holds about {need} "
        f"open files); raise it to {need} (ulimit -n, or nofile in /etc/security/limits.conf) or let "
        "Open MPI start its daemons as a tree (leave plm_rsh_no_tree_spawn out of OPENMPI_MCA_ARGS)")
    _, tree = _cfg("-H", ",".join(f"{a}:1" for a in REMOTE), "--mca-args", "-mca pml ob1")
    run.open_file_limit(tree, 1000, 2)                                # tree spawn: mpirun's own need is small
    assert "set" not in limits
