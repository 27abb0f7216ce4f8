"""Real multi-node tests of the namespace test hosts (tests/helpers/hosts/, the package
behind the `testhosts` fixture and scripts/testhosts.py).

Flags that point mpirun's ssh at our ssh_config (port 2222, key), verified below:

* Open MPI 4.1: ``--mca plm_rsh_args "-F <cfg>"``, ``--mca plm_rsh_agent "ssh -F <cfg>"``,
  or env ``OMPI_MCA_plm_rsh_args``.
* Open MPI 5.0: ``--prtemca plm_ssh_args "-F <cfg>"`` (the PRRTE name),
  ``--mca plm_rsh_args "-F <cfg>"`` (double dash: mpirun forwards it to PRRTE),
  ``--mca plm_rsh_agent "ssh -F <cfg>"``, or env ``PRTE_MCA_plm_ssh_args``.
  NOT honoured on 5.0 (ssh silently goes to port 22): single-dash
  ``-mca plm_rsh_args``, env ``OMPI_MCA_plm_rsh_args`` / ``OMPI_MCA_plm_rsh_agent``,
  ``--prtemca plm_rsh_args``.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from helpers import hosts
from helpers.mpis import OMPI4_MPIRUN as MPIRUN4, OMPI5_MPIRUN as MPIRUN5

pytestmark = pytest.mark.multinode

# The trailing sleep matters: with Open MPI 5.0.11 (PRRTE 3), ranks that exit at once
# on 2+ remote daemons make mpirun hang after all output now and then (about 1 run in 4
# for 6 x `hostname` over 3 hosts on a loaded 2-core box; 0 in 20 with `sleep 0.3`).
RANK_LINE = ('echo "R $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_LOCAL_RANK $(hostname)"; '
             'sleep 0.3')


def _mpirun(path):
    if not os.access(path, os.X_OK):
        pytest.skip("%s not found" % path)
    return path


@pytest.fixture(params=[MPIRUN5, MPIRUN4], ids=["ompi5", "ompi4"])
def mpirun(request):
    return _mpirun(request.param)


def _run_mpi(argv, timeout=40, env=None):
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    e.update(env or {})
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=e, stdin=subprocess.DEVNULL)


def _placements(stdout):
    """{rank: (local_rank, hostname)} from the RANK_LINE outputs."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "R":
            out[int(parts[1])] = (int(parts[2]), parts[3])
    return out


# --------------------------------------------------------------------------- (a) ssh

def test_ssh_reaches_each_host_with_its_own_hostname(testhosts):
    names = []
    for h in testhosts.hosts:
        p = testhosts.ssh(h, ["hostname"])
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == h.hostname
        names.append(p.stdout.strip())
    assert len(set(names)) == len(testhosts.hosts) == 3
    assert socket.gethostname() not in names


def test_hosts_are_isolated_namespaces(testhosts):
    h = testhosts.hosts[1]
    p = testhosts.run_in(h, ["hostname"])
    assert p.stdout.strip() == h.hostname
    p = testhosts.run_in(h, ["ip", "-4", "-o", "addr", "show"])
    assert (" %s/" % h.addr) in p.stdout and "127.0.0.1/8" in p.stdout
    # only the test subnet is reachable from inside: no default route at all
    p = testhosts.run_in(h, ["ip", "route", "show", "default"])
    assert p.returncode == 0 and p.stdout.strip() == ""
    # each sshd has its own /run (private tmpfs) with its privsep dir
    p = testhosts.run_in(h, ["nsenter", "-t", str(h.sshd_pid), "-m", "--",
                             "findmnt", "-n", "-o", "FSTYPE", "/run"])
    assert p.stdout.strip() == "tmpfs", p.stderr
    # host to host over the bridge
    other = testhosts.hosts[2]
    p = testhosts.run_in(h, ["ssh"] + testhosts.ssh_args + [other.addr, "hostname"])
    assert p.stdout.strip() == other.hostname, p.stderr


def test_hosts_json_describes_the_set(testhosts):
    desc = json.load(open(os.path.join(testhosts.state_dir, "hosts.json")))
    assert [h["addr"] for h in desc["hosts"]] == [h.addr for h in testhosts.hosts]
    assert desc["ssh_config"] == testhosts.ssh_config
    assert os.stat(testhosts.state_dir).st_mode & 0o777 == 0o700
    for h in testhosts.hosts:
        assert h.addr.startswith("10.231.0.")
        assert psutil.Process(h.sshd_pid).name() == "sshd"


# --------------------------------------------------------------------------- (b) mpirun

@pytest.mark.parametrize("n_hosts", [2, 3])
def test_mpirun_places_two_ranks_per_host(testhosts, mpirun, n_hosts):
    hf = testhosts.hostfile(slots_per_host=2, n_hosts=n_hosts)
    np_ = 2 * n_hosts
    argv = [mpirun, "--hostfile", hf, "-np", str(np_)] + \
        testhosts.mpirun_ssh_flags(mpirun) + ["sh", "-c", RANK_LINE]
    p = _run_mpi(argv)
    assert p.returncode == 0, p.stdout + p.stderr
    got = _placements(p.stdout)
    want = {r: (r % 2, testhosts.hosts[r // 2].hostname) for r in range(np_)}
    assert got == want, p.stdout + p.stderr


# (mpirun, extra flags, extra env) forms that all must reach the hosts
_FORMS = [
    ("ompi5", ["--mca", "plm_rsh_args", "-F {cfg}", "--bind-to", "none"], {}),
    ("ompi5", ["--mca", "plm_rsh_agent", "ssh -F {cfg}", "--bind-to", "none"], {}),
    ("ompi5", ["--bind-to", "none"], {"PRTE_MCA_plm_ssh_args": "-F {cfg}"}),
    ("ompi4", ["--mca", "plm_rsh_agent", "ssh -F {cfg}"], {}),
    ("ompi4", [], {"OMPI_MCA_plm_rsh_args": "-F {cfg}"}),
]


@pytest.mark.parametrize("which,flags,env", _FORMS,
                         ids=["5-mca-rsh_args", "5-mca-rsh_agent", "5-env-PRTE_ssh_args",
                              "4-mca-rsh_agent", "4-env-OMPI_rsh_args"])
def test_other_ssh_config_forms(testhosts, which, flags, env):
    mpirun = _mpirun(MPIRUN5 if which == "ompi5" else MPIRUN4)
    cfg = testhosts.ssh_config
    hf = testhosts.hostfile(slots_per_host=1, n_hosts=2)
    argv = [mpirun, "--hostfile", hf, "-np", "2"] + \
        [f.format(cfg=cfg) for f in flags] + ["sh", "-c", RANK_LINE]
    p = _run_mpi(argv, env={k: v.format(cfg=cfg) for k, v in env.items()})
    assert p.returncode == 0, p.stdout + p.stderr
    assert _placements(p.stdout) == {0: (0, testhosts.hosts[0].hostname),
                                     1: (0, testhosts.hosts[1].hostname)}


def test_mpi4py_allreduce_across_three_hosts(testhosts):
    """Real MPI traffic (TCP BTL) between the namespaces, not only the launch."""
    mpirun = _mpirun(MPIRUN5)
    pytest.importorskip("mpi4py")
    hf = testhosts.hostfile(slots_per_host=1, n_hosts=3)
    code = ("from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; "
            "s = c.allreduce(c.rank + 1); n = c.allgather(socket.gethostname()); "
            "print('OK', c.rank, s, ','.join(n)) if c.rank == 0 else None")
    argv = [mpirun, "--hostfile", hf, "-np", "3"] + testhosts.mpirun_ssh_flags(mpirun) + \
        [sys.executable, "-c", code]
    p = _run_mpi(argv)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("OK 0 6 %s" % ",".join(h.hostname for h in testhosts.hosts)) in p.stdout


# --------------------------------------------------------------------------- host loss

def test_kill_sshd_refuses_then_restore(testhosts_healthy):
    th = testhosts_healthy
    h = th.hosts[2]
    old = h.sshd_pid
    th.kill_sshd(h)
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == "zombie"
    p = th.ssh(h, ["true"], timeout=15)
    assert p.returncode == 255
    # mpirun over the dead host fails (and does not hang)
    mpirun = _mpirun(MPIRUN5)
    hf = th.hostfile(slots_per_host=1, n_hosts=3)
    r = _run_mpi([mpirun, "--hostfile", hf, "-np", "3"] + th.mpirun_ssh_flags(mpirun) +
                 ["sleep", "0.3"], timeout=40)
    assert r.returncode != 0
    th.restore(h)
    assert h.sshd_pid != old
    assert th.ssh(h, ["hostname"]).stdout.strip() == h.hostname


def test_link_down_drops_packets_then_restore(testhosts_healthy):
    th = testhosts_healthy
    h = th.hosts[1]
    with th.host_lost(h, "link"):
        p = subprocess.run(["ssh"] + th.ssh_args + ["-o", "ConnectTimeout=1", h.addr,
                                                    "true"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=20)
        assert p.returncode == 255
        assert "timed out" in p.stderr.lower() or "unreachable" in p.stderr.lower(), \
            p.stderr
    assert th.ssh(h, ["hostname"]).stdout.strip() == h.hostname


def test_crash_kills_everything_inside(testhosts_healthy):
    th = testhosts_healthy
    h = th.hosts[0]
    sleeper = subprocess.Popen(["ssh"] + th.ssh_args + [h.addr, "sleep", "300"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30      # was 200 tries (~4.5 s idle): ssh may take longer loaded
        while time.monotonic() < end:
            inside = []
            for x in subprocess.run(["ip", "netns", "pids", h.netns],
                                    stdout=subprocess.PIPE, text=True).stdout.split():
                try:
                    inside.append(psutil.Process(int(x)).name())
                except psutil.NoSuchProcess:
                    pass
            if "sleep" in inside:
                break
            time.sleep(0.02)
        assert "sleep" in inside
        th.crash(h)
        left = subprocess.run(["ip", "netns", "pids", h.netns], stdout=subprocess.PIPE,
                              text=True).stdout.split()
        assert left == []
        assert sleeper.wait(timeout=15) == 255   # the client saw the host go away
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    th.restore(h)
    assert th.ssh(h, ["hostname"]).stdout.strip() == h.hostname


# --------------------------------------------------------------------------- (c) down

def _free_prefix(candidates=("mlx", "mly", "mlz")):
    for p in candidates:
        if not hosts.prefix_in_use(p):
            return p
    pytest.skip("prefixes %s all in use by live sessions" % (candidates,))


def _assert_gone(prefix, sshd_pids, auth_line):
    ns = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                        text=True).stdout.split()
    assert not [n for n in ns if n.startswith(prefix)], ns
    assert not os.path.exists("/sys/class/net/%sbr0" % prefix)
    assert not [v for v in os.listdir("/sys/class/net") if v.startswith(prefix)]
    for pid in sshd_pids:
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    state = hosts.state_dir(prefix)
    assert not [p for p in psutil.process_iter(["cmdline"])
                if any(state in a for a in (p.info["cmdline"] or []))]
    try:
        keys = open(hosts.AUTH_KEYS).read()
    except FileNotFoundError:
        keys = ""
    assert auth_line not in keys
    assert "%s:%s:" % (hosts.MARKER, prefix) not in keys
    assert not os.path.exists(state)


def test_down_removes_exactly_what_up_made(testhosts):
    """Mini set beside the session's: owned by another (live) process, `down` refuses
    it; once the owner is gone it is stale; `down` then removes exactly what `up` made,
    twice (idempotent), and the session's set is untouched."""
    prefix = _free_prefix()
    owner = subprocess.Popen(["sleep", "60"])
    try:
        desc = hosts.up(1, prefix=prefix, owner_pid=owner.pid)
        st = json.load(open(os.path.join(hosts.state_dir(prefix), "state.json")))
        pids = [h["sshd_pid"] for h in desc["hosts"]]
        assert all(psutil.Process(p).name() == "sshd" for p in pids)
        assert st["auth_line"] in open(hosts.AUTH_KEYS).read().splitlines()
        p = subprocess.run(["ssh", "-F", desc["ssh_config"], desc["hosts"][0]["addr"],
                            "hostname"], stdout=subprocess.PIPE, text=True, timeout=20)
        assert p.stdout.strip() == "%s-host1" % prefix
        assert hosts.prefix_in_use(prefix)
        with pytest.raises(hosts.TestHostsError, match="belongs to live process"):
            hosts.down(prefix)
        with pytest.raises(hosts.PrefixInUse):
            hosts.up(1, prefix=prefix)
        owner.kill()
        owner.wait()
        assert not hosts.prefix_in_use(prefix)        # stale now: reclaimable
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        hosts.down(prefix, force=True)
    _assert_gone(prefix, pids, st["auth_line"])
    hosts.down(prefix)                    # idempotent
    _assert_gone(prefix, pids, st["auth_line"])
    # the session's set is untouched
    assert testhosts.ssh(testhosts.hosts[0], ["hostname"]).stdout.strip() == \
        testhosts.hosts[0].hostname


def test_down_after_up_died_halfway():
    """`up` is SIGKILLed right after starting the first of two sshds (netns, veths,
    bridge, authorized_keys line and one sshd exist); `down` must still clean it all."""
    why = hosts.missing_prereqs()
    if why:
        pytest.skip(why)
    prefix = _free_prefix()
    script = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, sys.argv[1])
        from helpers import hosts
        from helpers.hosts import sshd
        orig = sshd.spawn_sshd
        def spawn(prefix, i, sd, hostname):
            proc = orig(prefix, i, sd, hostname)
            if i == 2:
                os.kill(os.getpid(), 9)
            return proc
        sshd.spawn_sshd = spawn
        hosts.up(2, prefix=sys.argv[2])
    """)
    try:
        tests_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(hosts.__file__))))
        p = subprocess.run([sys.executable, "-c", script, tests_dir, prefix],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        assert p.returncode == -signal.SIGKILL, p.stderr
        st = json.load(open(os.path.join(hosts.state_dir(prefix), "state.json")))
        assert len(st["netns"]) == 2 and st["auth_line"]
        pids = [rec["pid"] for rec in st["pids"]]
        assert pids and all(psutil.pid_exists(x) for x in pids)
        assert hosts.prefix_in_use(prefix)   # no owner pid: held until `down`
    finally:
        hosts.down(prefix)
    _assert_gone(prefix, pids, st["auth_line"])
