"""Pytest fixtures: real multi-node test hosts (network namespaces + sshd) on one machine.

Imported by tests/conftest.py (``from helpers.fixtures_hosts import *``).  Use::

    @pytest.mark.multinode
    def test_x(testhosts):
        hf = testhosts.hostfile(slots_per_host=2, n_hosts=2)
        subprocess.run([mpirun, "--hostfile", hf, *testhosts.mpirun_ssh_flags(mpirun),
                        ...])

``scalehosts`` is the same for the scale tests: ``MPILAUNCH_SCALE_HOSTS`` hosts (16 unless
set; up to 64 here) in a wide set (a /24 of its own in 10.231.0.0/16, prefix ``mls`` ... ``mlq``),
also session-scoped, built once (~4 s for 16) and torn down like ``testhosts``; its
``leftovers()`` lists what runs on each host besides sshd.

``testhosts`` is session-scoped: 3 hosts (``<prefix>1..3``, hostnames
``<prefix>-host1..3``, addresses in 10.231.0.0/24, sshd on port 2222), built by the
test package tests/helpers/hosts/ and always torn down (finalizer, KeyboardInterrupt, SIGTERM,
atexit).
A test that breaks a host (``link_down``, ``kill_sshd``, ``crash``) must restore it so
later tests see 3 good hosts: use the ``testhosts_healthy`` fixture (same object, calls
``restore_all()`` after the test) or the ``host_lost(host, how)`` context manager.
The prefix is ``mlt`` unless another live session (or a CLI-made set) holds it, then
``mlu``, ``mlv``, ``mlw``; a set whose session was SIGKILLed is reclaimed by the next one.

Open MPI 5.0.11 caveat (PRRTE race, seen here): when ranks on 2+ remote daemons exit
immediately (``hostname``, ``true``), mpirun sometimes hangs after all output, never
collecting the daemons' termination reports (~1 in 4 runs of 6 x ``hostname`` over
3 hosts on a loaded 2-core box; Open MPI 4.1 never).  Give test rank commands some life
(``sh -c '...; sleep 0.3'``) and always pass a timeout.
"""
import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys

import pytest

from helpers import hosts

__all__ = ["testhosts", "testhosts_healthy", "scalehosts", "scalehosts_healthy", "porthosts",
           "sharedhosts", "v6hosts", "TestHosts",
           "TestHost", "N_TEST_HOSTS", "SESSION_PREFIXES", "SCALE_PREFIXES", "scale_hosts_wanted"]

N_TEST_HOSTS = 3
SESSION_PREFIXES = ("mlt", "mlu", "mlv", "mlw")
SCALE_PREFIXES = ("mls", "mlr", "mlq")
N_SCALE_HOSTS = 16        # CI's size; the bench runs 32 and 64


def scale_hosts_wanted():
    return int(os.environ.get("MPILAUNCH_SCALE_HOSTS") or N_SCALE_HOSTS)


# Connect to each ADDR PORT given until it answers, for at most TIMEOUT s (run inside a host).
_REACH = """\
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[1])
for peer in sys.argv[2:]:
    addr, port = peer.rsplit(" ", 1)
    while True:
        try:
            socket.create_connection((addr, int(port)), timeout=2).close()
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.exit("%s port %s: %s" % (addr, port, exc))
            time.sleep(0.05)
"""


class TestHost:
    """One namespace host.  ``addr`` is what goes into hostfiles and ssh commands."""
    __test__ = False  # not a test class

    def __init__(self, d):
        self.index = d["index"]          # 1-based
        self.addr = d["addr"]
        self.hostname = d["hostname"]
        self.netns = d["netns"]
        self.veth = d["veth"]            # root-namespace end of its link
        self.sshd_pid = d["sshd_pid"]
        self.sshd_log = d["sshd_log"]
        self.port = d.get("port", hosts.SSH_PORT)   # its sshd's port

    def __repr__(self):
        return "TestHost(%d, %s, %s)" % (self.index, self.addr, self.hostname)


class TestHosts:
    """The live set.  Every ``host`` argument may be a TestHost, a 0-based index into
    ``hosts``, or a host's addr / hostname / netns name."""
    __test__ = False

    def __init__(self, desc):
        self.prefix = desc["prefix"]
        self.state_dir = desc["state_dir"]
        self.ssh_config = desc["ssh_config"]
        self.ssh_args = ["-F", self.ssh_config]
        self.key = desc["key"]
        self.port = desc["port"]
        self.subnet = desc["subnet"]          # the only addresses tests may target
        self.bridge_addr = desc["bridge"]["addr"]
        self.hosts = [TestHost(h) for h in desc["hosts"]]
        self._n_files = 0
        self._mpi_major = {}

    # -- lookup -----------------------------------------------------------------
    def host(self, host):
        if isinstance(host, TestHost):
            return host
        if isinstance(host, int):
            return self.hosts[host]
        for h in self.hosts:
            if host in (h.addr, h.hostname, h.netns):
                return h
        raise KeyError("no test host %r" % (host,))

    # -- running things ----------------------------------------------------------
    def run_in(self, host, argv, timeout=30, check=False, **kw):
        """Run argv inside the host's network namespace (``ip netns exec``), and in its
        UTS namespace too while its sshd is alive (so ``hostname`` answers the host's
        name).  Returns CompletedProcess (text, captured output by default)."""
        h = self.host(host)
        argv = ["ip", "netns", "exec", h.netns] + list(argv)
        if hosts.alive(h.sshd_pid):
            argv = ["nsenter", "-t", str(h.sshd_pid), "-u", "--"] + argv
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.run(argv, timeout=timeout, check=check, text=True, **kw)

    def ssh(self, host, argv, timeout=30, check=False, **kw):
        """``ssh -F <ssh_config> <addr> argv...`` (argv is joined by the remote shell)."""
        h = self.host(host)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(["ssh"] + self.ssh_args + [h.addr] + list(argv),
                              timeout=timeout, check=check, text=True, **kw)

    def hostfile(self, slots_per_host=2, n_hosts=None, path=None):
        """Write an Open MPI hostfile (``<addr> slots=N`` lines) for the first n_hosts
        hosts (default: all); returns its path (inside the state dir unless given)."""
        n_hosts = len(self.hosts) if n_hosts is None else n_hosts
        if not 1 <= n_hosts <= len(self.hosts):
            raise ValueError("n_hosts must be 1..%d" % len(self.hosts))
        if path is None:
            self._n_files += 1
            path = os.path.join(self.state_dir, "hostfile-%d-%dx%d" % (
                self._n_files, n_hosts, slots_per_host))
        with open(path, "w") as f:
            for h in self.hosts[:n_hosts]:
                f.write("%s slots=%d\n" % (h.addr, slots_per_host))
        return path

    def mpi_major(self, mpirun):
        """Major version of the Open MPI behind this mpirun (4 or 5)."""
        if mpirun not in self._mpi_major:
            out = subprocess.run([mpirun, "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=30).stdout
            m = re.search(r"Open MPI\)?\s+(\d+)\.", out) or re.search(r"(\d+)\.\d+", out)
            if not m:
                raise RuntimeError("cannot tell the Open MPI version of %s: %r"
                                   % (mpirun, out))
            self._mpi_major[mpirun] = int(m.group(1))
        return self._mpi_major[mpirun]

    def mpirun_ssh_flags(self, mpirun):
        """mpirun flags that make its ssh use our ssh_config (port 2222, key).
        4.x: ``--mca plm_rsh_args "-F cfg"``; 5.x: ``--prtemca plm_ssh_args "-F cfg"
        --bind-to none``.  No interface selection is needed (the namespaces have no
        route off 10.231.0.0/24), and on 5.0.11 ``--prtemca oob_tcp_if_include <cidr>``
        makes prterun segfault now and then: do not add it."""
        cfg = "-F %s" % self.ssh_config
        if self.mpi_major(mpirun) >= 5:
            return ["--prtemca", "plm_ssh_args", cfg, "--bind-to", "none"]
        return ["--mca", "plm_rsh_args", cfg]

    # -- host loss ---------------------------------------------------------------
    def link_down(self, host):
        """Pull the host's cable: packets to/from it are lost (connects hang until
        ConnectTimeout, open TCP connections stall)."""
        hosts.set_link(self.prefix, self.host(host).index, False)

    def link_up(self, host):
        hosts.set_link(self.prefix, self.host(host).index, True)

    def kill_sshd(self, host):
        """Kill the host's sshd (new ssh connections refused; open sessions survive)."""
        hosts.kill_sshd(self.prefix, self.host(host).index)

    def crash(self, host):
        """Kill every process inside the host (sshd, MPI daemons, ranks)."""
        hosts.crash(self.prefix, self.host(host).index)

    def start_sshd(self, host):
        h = self.host(host)
        h.sshd_pid = hosts.start_sshd(self.prefix, h.index)
        return h.sshd_pid

    def restore(self, host):
        """Link up and sshd running again, and the other hosts reaching it."""
        self.link_up(host)
        self.start_sshd(host)
        self.wait_reachable([host])

    def restore_all(self):
        for h in self.hosts:
            self.link_up(h)
            self.start_sshd(h)
        self.wait_reachable(self.hosts)

    def wait_reachable(self, targets, timeout=30):
        """Wait until every other host connects to each of ``targets``' ssh port. A link just
        brought up can lose the first address look-ups, and a host that tried to reach the
        target while its link was down (a job's ranks did) finds 'No route to host' until
        the look-up is made again: a full run's next test failed its preflight that way."""
        wanted = [self.host(t) for t in targets]
        for other in self.hosts:
            peers = [f"{h.addr} {h.port}" for h in wanted if h is not other]
            if not peers:
                continue
            r = self.run_in(other, [sys.executable, "-c", _REACH, str(timeout), *peers],
                            timeout=timeout + 15)
            if r.returncode != 0:
                raise hosts.TestHostsError("after restoring: %s cannot reach %s"
                                           % (other.hostname, r.stderr.strip()))

    @contextlib.contextmanager
    def host_lost(self, host, how="link"):
        """``with testhosts.host_lost(h, "link"|"sshd"|"crash"):`` ... restored after."""
        action = {"link": self.link_down, "sshd": self.kill_sshd, "crash": self.crash}[how]
        action(host)
        try:
            yield self.host(host)
        finally:
            self.restore(host)

    def leftovers(self, hosts_=None):
        """{host: [(pid, cmdline), ...]} of the processes running inside each host (all, or
        those given) besides its sshd, hosts with none left out: what a job left behind."""
        wanted = None if hosts_ is None else {self.host(h).index for h in hosts_}
        return {self.hosts[i - 1]: procs for i, procs in hosts.processes(self.prefix).items()
                if procs and (wanted is None or i in wanted)}

    def down(self):
        hosts.down(self.prefix)


@pytest.fixture(scope="session")
def testhosts(request):
    """Three namespace hosts with sshd; torn down at session end (always)."""
    return _session_set(request, N_TEST_HOSTS, SESSION_PREFIXES, wide=False)


@pytest.fixture
def testhosts_healthy(testhosts):
    """``testhosts``, restored (links up, sshd running) after the test."""
    yield testhosts
    testhosts.restore_all()


# Networks as clusters have them (tests/multihost/test_ports.py, test_ipv6.py): three hosts
# with sshd on ports 2201-2203 at their own addresses; three behind one address (one namespace,
# a UTS and mount namespace per sshd: containers sharing a machine); two IPv6-only hosts.
PORTS = [2201, 2202, 2203]


@pytest.fixture(scope="session")
def porthosts(request):
    return _session_set(request, 3, ("mlpa", "mlpb"), wide=False, ports=PORTS)


@pytest.fixture(scope="session")
def sharedhosts(request):
    return _session_set(request, 3, ("mlsa", "mlsb"), wide=False, ports=PORTS, shared=True)


@pytest.fixture(scope="session")
def v6hosts(request):
    return _session_set(request, 2, ("mlsix", "mlsev"), wide=False, ipv6=True)


@pytest.fixture(scope="session")
def scalehosts(request):
    """``MPILAUNCH_SCALE_HOSTS`` (16) namespace hosts in a wide set; torn down at session end."""
    return _session_set(request, scale_hosts_wanted(), SCALE_PREFIXES, wide=True)


@pytest.fixture
def scalehosts_healthy(scalehosts):
    """``scalehosts``, restored (links up, sshd running) after the test."""
    yield scalehosts
    scalehosts.restore_all()


def _session_set(request, n, prefixes, wide, **layout):
    why = hosts.missing_prereqs()
    if why:
        pytest.skip(why)

    desc = None
    for prefix in prefixes:
        if hosts.prefix_in_use(prefix):
            continue
        done = []

        def teardown(prefix=prefix, done=done):
            if not done:
                done.append(True)
                hosts.down(prefix)

        # Registered before anything is created: a half-failed up is undone as well.
        atexit.register(teardown)
        request.addfinalizer(teardown)
        try:
            desc = hosts.up(n, prefix=prefix, owner_pid=os.getpid(), wide=wide, **layout)
            break
        except hosts.PrefixInUse:
            done.append(True)        # not ours: never tear it down
            continue
        except hosts.TestHostsError as e:
            if str(e).startswith("ip netns add does not work here"):
                pytest.skip(str(e))
            raise
    if desc is None:
        pytest.skip("all test-host prefixes %s are held by live sessions" % (prefixes,))

    old_term = signal.getsignal(signal.SIGTERM)
    if old_term in (signal.SIG_DFL, None):
        def on_term(signum, frame):
            # Turn SIGTERM into KeyboardInterrupt: pytest then runs session teardown.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            raise KeyboardInterrupt("SIGTERM")
        signal.signal(signal.SIGTERM, on_term)
        request.addfinalizer(lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    return TestHosts(desc)
