"""`mpilaunch check --deep`, its parts without test hosts: what is an outlier and how it is
said (check/outliers.py), when what is measured (check/schedule.py), the settings' one-line
refusals, and the agent (check/agent.py) measuring this machine for real: forked compute
slots, a memory copy, a log-dir write, a TCP link to itself, the token, a cgroup CPU quota."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from mpilaunch.check import agent, outliers, schedule
from mpilaunch.check.outliers import Host, Link
from mpilaunch.check.results import FAIL, OK, WARN

from helpers.launch import clean_env, mpilaunch_argv

G = 1e9


def host(name, compute=(40.0, 40.0), memory=10 * G, rate=1 * G, free=100 * G, slots=2,
         devices=None, cpus=(2, None, ""), kind="gemm", own=""):
    return Host(name, name, own, slots, list(compute), kind, memory,
                {"where": "/logs", "free": free, "rate": rate}, devices or {}, cpus)


def ring(n, bw=2 * G, rtt=30e-6, slow=()):
    """The ring's links, those in ``slow`` (src, dst) at 1.2 MB/s."""
    return [Link(i, (i + 1) % n, 1.2e6 if (i, (i + 1) % n) in slow else bw, rtt, None, "eth0")
            for i in range(n)]


def checks(found):
    return sorted((f.host, f.check) for f in found)


# --------------------------------------------------------------------------- outliers

def test_a_healthy_set_within_the_threshold_has_no_outlier():
    hosts = [host(f"h{i}", compute=(30 + i, 31 + i), memory=(8 + i) * G) for i in range(8)]
    assert outliers.findings(hosts, ring(8), 2.5, 1 * G) == []
    line = outliers.verdict(hosts, ring(8), [], 2.5, 3.21)
    assert line == "mpilaunch check --deep: no outlier beyond 2.5x the median (8 host(s), 8 link(s); 3.2s)"


def test_a_slow_host_is_named_with_its_figure_the_median_and_the_factor():
    hosts = [host(f"h{i}") for i in range(5)]
    hosts[3] = host("h3", compute=(2.0, 2.1), own="node-3")
    found = outliers.findings(hosts, ring(5), 2.5, 1 * G)
    assert checks(found) == [(3, "compute")]
    assert outliers.verdict(hosts, ring(5), found, 2.5, 4.0) == (
        "mpilaunch check --deep: 1 outlier host(s) beyond 2.5x the median — h3 [node-3]: "
        "compute 2.05 GFLOP/s per slot, median 40 (19.5x slower) (4.0s)")
    res = {(r.host, r.check): r for r in outliers.results(hosts, ring(5), found)}
    assert res[("h3", "compute")].status == FAIL
    assert res[("h3", "compute")].line() == (
        "h3: [node-3] compute 2.05 GFLOP/s per slot, median 40 (19.5x slower)")
    assert res[("h2", "compute")] .status == OK and res[("h2", "compute")].message == "40GF/s"


def test_just_under_the_threshold_is_not_an_outlier():
    hosts = [host(f"h{i}") for i in range(4)]
    hosts[0] = host("h0", compute=(16.1, 16.1))      # 40 / 16.1 = 2.48
    assert outliers.findings(hosts, ring(4), 2.5, 1 * G) == []
    hosts[0] = host("h0", compute=(15.9, 15.9))      # 2.52
    assert checks(outliers.findings(hosts, ring(4), 2.5, 1 * G)) == [(0, "compute")]


def test_workloads_are_compared_only_with_their_own_kind():
    """A host without numpy runs the Python loop: its Mloop/s are not GFLOP/s."""
    hosts = [host("a"), host("b"), host("c", compute=(12.0, 12.0), kind="loop")]
    assert outliers.findings(hosts, ring(3), 2.5, 1 * G) == []


def test_a_throttled_sender_is_told_from_its_peer_by_the_retest():
    """h2's egress is throttled: the ring shows 2->3 slow; the retest through h0 adds 2->0
    (slow too) and 0->3 (fast): h2 is named, h3 is not, with the links that were slow."""
    hosts = [host(f"h{i}") for i in range(6)]
    links = ring(6, slow={(2, 3)})
    assert outliers.slow_links(links, 2.5) == [(2, 3)]
    assert schedule.retest_links([(2, 3)], 6, [0, 1, 4, 5, 3, 2]) == [(2, 3), (2, 0), (0, 3)]
    again = [Link(2, 3, 1.1e6, 30e-6, None, "eth0"), Link(2, 0, 1.2e6, 31e-6, None, "eth0"),
             Link(0, 3, 1.9 * G, 29e-6, None, "eth0")]
    merged = outliers.merge_links(links, again)
    assert len(merged) == 8 and [ln for ln in merged if (ln.src, ln.dst) == (2, 3)][0].bw == 1.2e6
    found = outliers.findings(hosts, merged, 2.5, 1 * G)
    assert checks(found) == [(2, "net")]
    text = outliers.verdict(hosts, merged, found, 2.5, 5.0)
    assert "h2: network 1.2 MB/s, median 2 GB/s (1667x slower): link h2→h3 and 1 more" in text
    res = [r for r in outliers.results(hosts, merged, found) if r.status == FAIL]
    assert [r.line() for r in res] == [
        "h2: network 1.2 MB/s, median 2 GB/s (1667x slower): links h2→h3, h2→h0"]
    cells = outliers.table_cells(hosts, merged, found)
    # h3's best receiving link is 0->3 now
    assert cells["h2"]["net"] == "1.2MB/s!" and cells["h3"]["net"] == "1.9GB/s"


def test_with_one_direction_only_both_ends_of_a_slow_link_are_suspects():
    """Two hosts: the ring is 0->1 and 1->0; 1->0 slow blames 1's sending and 0's receiving."""
    hosts = [host("a"), host("b")]
    links = [Link(0, 1, 2 * G, 3e-5, None, ""), Link(1, 0, 1e6, 3e-5, None, "")]
    assert checks(outliers.findings(hosts, links, 2.5, 1 * G)) == [(0, "net"), (1, "net")]
    assert schedule.retest_links([(1, 0)], 2, [0, 1]) == [(1, 0), (0, 1)]


def test_round_trips_need_the_factor_and_a_millisecond():
    hosts = [host(f"h{i}") for i in range(8)]
    noisy = [ln._replace(rtt=3e-5 if 1 not in (ln.src, ln.dst) else 2e-4) for ln in ring(8)]
    assert outliers.findings(hosts, noisy, 2.5, 1 * G) == []          # 6.7x, but +0.17 ms
    slow = [ln._replace(rtt=3e-5 if 1 not in (ln.src, ln.dst) else 4e-3) for ln in ring(8)]
    found = outliers.findings(hosts, slow, 2.5, 1 * G)
    assert checks(found) == [(1, "rtt")]
    assert "h1: round trip 4ms, median 0.03ms (133x)" in outliers.verdict(hosts, slow, found, 2.5, 1.0)


def test_absolute_rules_free_space_cpus_and_a_slow_disk_only_warns():
    hosts = [host("a", free=0.4 * G), host("b"),
             host("d", cpus=(2, 0.1, "/sys/fs/cgroup/cpu/x/cpu.cfs_quota_us=10000 per 100000")),
             host("e", rate=0.1 * G), host("f", cpus=(1, None, ""))]
    found = outliers.findings(hosts, ring(5), 2.5, 1 * G)
    assert checks(found) == [(0, "free"), (2, "cpus"), (3, "disk"), (4, "cpus")]
    res = {(r.host, r.check): r for r in outliers.results(hosts, ring(5), found)}
    assert res[("a", "free")].message == "log dir /logs: 400MB free, less than 1GB"
    assert res[("d", "cpus")].message == (
        "0.1 CPU(s) for 2 slot(s) (/sys/fs/cgroup/cpu/x/cpu.cfs_quota_us=10000 per 100000)")
    assert res[("f", "cpus")].message == "1 CPU(s) for 2 slot(s) (affinity)"
    assert res[("e", "disk")].status == WARN
    assert res[("e", "disk")].message == "log dir write 100 MB/s, median 1 GB/s (10x slower)"
    assert outliers.table_cells(hosts, ring(5), found)["d"]["cpus"] == "0.1!"
    line = outliers.verdict(hosts, ring(5), found, 2.5, 1.0)
    assert line.startswith("mpilaunch check --deep: 3 outlier host(s)")   # a warning is not one
    assert "e:" not in line and "d: 0.1 CPU(s) for 2 slot(s)" in line


def test_devices_are_counted_against_the_slots_where_any_host_shows_some():
    eight = {"davinci": list(range(8))}
    hosts = [host("a", devices=eight, slots=8, cpus=(8, None, "")),
             host("b", devices={"davinci": [0, 1, 2, 3]}, slots=8, cpus=(8, None, "")),
             host("c", devices={"nvidia": [0, 1]}, slots=2), host("d", slots=1)]
    found = outliers.findings(hosts, ring(4), 2.5, 1 * G)
    assert checks(found) == [(1, "devices"), (3, "devices")]
    res = {(r.host, r.check): r for r in outliers.results(hosts, ring(4), found)}
    assert res[("b", "devices")].message == "4 device(s) (/dev/davinci*) for 8 slot(s)"
    assert res[("d", "devices")].message == "0 device(s) () for 1 slot(s)"
    assert (res[("a", "devices")].status, res[("a", "devices")].message) == (OK, "8/8")
    assert (res[("c", "devices")].status, res[("c", "devices")].message) == (OK, "2/2")
    cpu_only = [host("a"), host("b")]
    assert outliers.findings(cpu_only, ring(2), 2.5, 1 * G) == []


def test_a_measurement_taken_twice_keeps_the_better_figures():
    first = [host("a"), host("b", compute=(1.0, 1.0), memory=1 * G, rate=0.1 * G)]
    again = {1: host("b", compute=(38.0, 39.0), memory=0.5 * G, rate=0.9 * G)}
    merged = outliers.merge_better(first, again)
    assert merged[1].compute == [38.0, 39.0] and merged[1].memory == 1 * G
    assert merged[1].disk["rate"] == 0.9 * G and merged[1].disk["free"] == 100 * G


def test_rounds_are_averaged_per_slot():
    one = host("a", compute=(10.0, 30.0), memory=4 * G, rate=1 * G)
    two = host("a", compute=(20.0, 50.0), memory=6 * G, rate=3 * G)
    got = schedule.combine([one, two])
    assert got.compute == [15.0, 40.0] and got.memory == 5 * G and got.disk["rate"] == 2 * G


# --------------------------------------------------------------------------- schedule

def test_the_ring_and_its_pairs_are_fixed_by_the_seed():
    assert schedule.ring_links(4, 0) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert schedule.ring_links(1, 3) == []
    a, b = schedule.ring_links(8, 2), schedule.ring_links(8, 2)
    assert a == b and len(a) == 8 + 16 and len(set(a)) == 24
    assert all(s != d for s, d in a)


def test_waves_never_put_two_links_on_one_machine():
    links = schedule.ring_links(6, 0)
    one_machine = schedule.link_waves(links, ["m"] * 6)
    assert [len(w) for w in one_machine] == [1] * 6
    own = schedule.link_waves(links, [f"m{i}" for i in range(6)])
    assert sum(len(w) for w in own) == 6 and len(own) <= 3
    for wave in own:
        used = [m for s, d in wave for m in (s, d)]
        assert len(used) == len(set(used))


def test_windows_shrink_with_the_hosts_of_a_machine_and_keep_their_floors():
    few = schedule.windows(6, 3, 3)
    assert few.compute == 0.15 and few.net == 0.15
    many = schedule.windows(6, 32, 32)
    assert 0.02 <= many.compute < 0.03 and many.net < 0.04
    assert schedule.windows(1, 1000, 1000) == pytest.approx(schedule.Windows(0.021, 0.0045, 0.0045, 0.02))
    # the host-by-host stage and the links stay within about 80% of the budget
    w = schedule.windows(6, 32, 32)
    turn = w.compute + w.memory + w.disk + schedule.HOST_OVERHEAD
    assert 32 * schedule.ROUNDS * turn + 32 * (w.net + schedule.LINK_OVERHEAD) <= 0.8 * 6 + 1e-9


# --------------------------------------------------------------------------- settings

@pytest.mark.parametrize("args,expected", [
    (["--deep-threshold", "1"], "--deep-threshold='1': out of range; give a factor of at least 1.1 (times slower than the median)"),
    (["--deep-threshold", "x"], "--deep-threshold='x': not a number; give a factor of at least 1.1 (times slower than the median)"),
    (["--deep-budget", "0"], "--deep-budget='0': out of range; give a number of seconds, more than 0"),
    (["--deep-min-free", "-1"], "--deep-min-free='-1': out of range; give a number of GB, 0 or more"),
    (["--pairs", "two"], "--pairs='two': not a whole number; give a whole number at least 0"),
    (["--collective", "mpi"], "--collective='mpi': give gloo or nccl"),
    (["--ssh-only"], "--deep: not with --ssh-only, nor inside a Slurm allocation (its agents are started over ssh); run it from a login to the hosts"),
])
def test_bad_deep_settings_are_one_line_and_exit_2(args, expected, tmp_path):
    p = subprocess.run(mpilaunch_argv("check", "-H", "localhost:1", "--deep", *args),
                       env=clean_env(TMPDIR=str(tmp_path)), capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert (p.returncode, p.stderr, p.stdout) == (2, f"mpilaunch: error: {expected}\n", "")
    assert os.listdir(tmp_path) == []          # nothing started, no run dir


# --------------------------------------------------------------------------- the agent, here

@pytest.fixture(scope="module")
def numpy_or_none():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def test_compute_forks_one_process_per_slot_and_counts(numpy_or_none):
    t0 = time.monotonic()
    res = agent.compute({"slots": 3, "window": 0.05}, numpy_or_none)
    assert time.monotonic() - t0 < 2
    assert res["kind"] == ("gemm" if numpy_or_none is not None else "loop")
    assert len(res["rates"]) == 3 and all(r > 0 for r in res["rates"])
    loop = agent.compute({"slots": 1, "window": 0.05}, None)
    assert loop["kind"] == "loop" and loop["rates"][0] > 0.1        # Mloop/s


def test_memory_and_disk_measure_and_the_scratch_file_goes(tmp_path):
    assert agent.memory({"window": 0.02})["rate"] > 1e8
    res = agent.disk({"dir": str(tmp_path / "not" / "yet"), "bytes": 1 << 20, "window": 0.2})
    assert res["where"] == str(tmp_path) and res["free"] > 0 and res["rate"] > 0
    assert os.listdir(tmp_path) == []
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    if os.geteuid() != 0:
        assert "cannot create a file in" in agent.disk({"dir": str(ro), "bytes": 1, "window": 0.1})["error"]
    full = agent.disk({"dir": "/proc/1", "bytes": 1 << 20, "window": 0.1})
    assert full["error"].startswith("cannot create a file in /proc/1")


def _serve_here(token):
    """The agent in a process of its own, as the probe forks it: (process, port)."""
    code = ("import socket,sys; from mpilaunch.check import agent; ls=socket.socket(); "
            "ls.bind(('127.0.0.1', 0)); ls.listen(8); print(ls.getsockname()[1], flush=True); "
            "agent.serve({'token': sys.argv[1], 'life': 60}, ls)")
    proc = subprocess.Popen([sys.executable, "-c", code, token], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def test_a_link_to_itself_and_the_token():
    """A command connection gets its hello, sends to the agent itself, and the receiver times
    what arrived; without the token a connection is closed unanswered; the agent exits when
    the command connection closes."""
    proc, port = _serve_here("sekrit")
    bad = socket.create_connection(("127.0.0.1", port), 5)
    bad.sendall(b'{"t": "guess", "cmd": 1}\n')
    bad.settimeout(5)
    assert bad.recv(100) == b""                # dropped, nothing said
    c = socket.create_connection(("127.0.0.1", port), 5)
    c.sendall(b'{"t": "sekrit", "cmd": 1}\n')
    f = c.makefile("rw")
    hello = json.loads(f.readline())
    assert hello["op"] == "hello" and hello["ncpu"] == len(os.sched_getaffinity(0))
    assert hello["boot_id"] == open("/proc/sys/kernel/random/boot_id").read().strip()

    def ask(cmd):
        f.write(json.dumps(cmd) + "\n")
        f.flush()
        return json.loads(f.readline())

    sent = ask({"op": "send", "addr": "127.0.0.1", "port": port, "id": "x1", "pings": 3,
                "bytes": 16 << 20, "window": 0.2, "timeout": 5})
    assert sent["iface"] == "lo" and 0 < sent["rtt"] < 0.05, sent
    got = ask({"op": "result", "id": "x1", "timeout": 5})
    assert got["bytes"] > 1 << 20 and got["bytes"] / got["seconds"] > 50e6, got
    assert ask({"op": "result", "id": "never", "timeout": 0.1}) == {
        "error": "no transfer never arrived", "op": "result"}
    assert "error" in ask({"op": "send", "addr": "127.0.0.1", "port": 1, "id": "x2", "pings": 1,
                           "bytes": 1, "window": 0.1, "timeout": 2})
    assert ask({"op": "prepare", "gemm": False}) == {"numpy": None, "op": "prepare"}
    f.close()
    c.close()
    assert proc.wait(10) == 0


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/cpu"),
                    reason="needs root and the cgroup v1 cpu controller")
def test_the_cpu_quota_of_its_cgroup_is_read(tmp_path):
    """A real cgroup with a 20% quota: a process put in it reports 0.2 CPUs and the file."""
    cg = "/sys/fs/cgroup/cpu/mpilaunch-test-quota-%d" % os.getpid()
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(cg, "cpu.cfs_quota_us"), "w") as f:
            f.write("20000")
        code = ("import os,sys; open(sys.argv[1]+'/cgroup.procs','w').write(str(os.getpid())); "
                "from mpilaunch.check import agentfacts; print(agentfacts.cpu_limit())")
        out = subprocess.run([sys.executable, "-c", code, cg], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        assert out.strip() == repr((0.2, f"{cg}/cpu.cfs_quota_us=20000 per 100000"))
        from mpilaunch.check import agentfacts
        assert agentfacts.cpu_limit() == (None, "")            # this process: no quota
    finally:
        for _ in range(50):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)


def test_the_report_adds_the_deep_columns_and_puts_the_verdict_last_but_one():
    from mpilaunch.check import CheckResult, report_lines
    from mpilaunch.check.deep import DeepReport

    hosts = [host("a"), host("b", compute=(1.0, 1.0)), host("c")]
    found = outliers.findings(hosts, ring(3), 2.5, 1 * G)
    usual = [CheckResult(h, h, c, OK) for h in "abc" for c in ("resolve", "ssh-port", "ssh")]
    res = usual + outliers.results(hosts, ring(3), found)
    rep = DeepReport(res, outliers.table_cells(hosts, ring(3), found),
                     outliers.verdict(hosts, ring(3), found, 2.5, 2.0), ["deep: a note"])
    lines = report_lines(res, 3, 2.5, table=True, deep=rep)
    assert lines[0] == "FAIL b: compute 1 GFLOP/s per slot, median 40 (40x slower)"
    head = lines[1].split()
    assert head == ["HOST", "ADDRESS", "RESOLVE", "SSH-PORT", "SSH", "CPUS", "COMPUTE", "MEMORY",
                    "DISK", "FREE", "DEVICES", "NET", "RTT"]
    assert lines[3].split() == ["b", "b", "ok", "ok", "ok", "2", "1GF/s!", "10GB/s", "1GB/s",
                                "100G", "-", "2GB/s", "0.03ms"]
    assert lines[5:] == ["deep: a note", rep.verdict,
                         "mpilaunch check: FAILED — 1 of 3 host(s) failed (compute 1); 0 warning(s); 2.5s"]


def test_preflight_takes_ssh_or_deep_only(tmp_path):
    p = subprocess.run(mpilaunch_argv("--preflight", "deeper", "-np", "1", "--no-python", "true"),
                       env=clean_env(TMPDIR=str(tmp_path)), capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert (p.returncode, p.stdout, p.stderr) == (
        2, "", "mpilaunch: error: --preflight='deeper': give ssh or deep\n")
    assert os.listdir(tmp_path) == []
