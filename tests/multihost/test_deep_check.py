"""`mpilaunch check --deep` on namespace test hosts, made slow for real: one host's link
through tc's token bucket, one host's processes through a cgroup CPU quota, and a healthy
set that must show no outlier, run after run.

CI uses the session's 3 hosts. With MPILAUNCH_BENCH=1 the same runs go over a set of 8
hosts (and 32 where the test hosts can make that many), 3 times each, timed, written to
$MPILAUNCH_BENCH_OUT/mpilaunch-deep-bench.txt: the numbers docs/CHECK.md quotes."""
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import hosts as hostsets
from helpers.fixtures_hosts import TestHosts
from helpers.launch import clean_env, mpilaunch_argv
from helpers.throttle import cgroup_path, cpu_throttled, link_throttled, qdiscs

pytestmark = pytest.mark.multinode
BENCH = os.environ.get("MPILAUNCH_BENCH") == "1"


def deep(th, n_hosts=None, *extra, timeout=120):
    hf = th.hostfile(slots_per_host=2, n_hosts=n_hosts)
    t0 = time.monotonic()
    p = subprocess.run(mpilaunch_argv("check", "--hostfile", hf, "--ssh-args", f"-F {th.ssh_config}",
                                      "--deep", *extra),
                       env=clean_env(), capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return p, time.monotonic() - t0


def verdict(p):
    return [ln for ln in p.stdout.splitlines() if ln.startswith("mpilaunch check --deep:")][-1]


def rows(p):
    lines = p.stdout.splitlines()
    head = [ln for ln in lines if ln.startswith("HOST ")][0].split()
    return {ln.split()[0]: dict(zip(head, ln.split())) for ln in lines if ln.startswith("10.231.")}


def fails(p):
    return [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL ")]


def agents_left():
    """Processes still running the probe's code with a deep check's token: its agents (they
    end with the check)."""
    import psutil

    left = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or ()
            if any("@@mpilaunch-probe" in a for a in cmd) and any('"token"' in a for a in cmd):
                left.append(proc.pid)
        except psutil.Error:
            pass
    return left


def check_healthy(th, n_hosts=None):
    p, took = deep(th, n_hosts)
    for _ in range(20):          # the agents exit when the checker's connection closes
        if not agents_left():
            break
        time.sleep(0.1)
    assert agents_left() == []
    assert p.returncode == 0, p.stdout + p.stderr
    assert verdict(p).startswith("mpilaunch check --deep: no outlier beyond 2.5x the median"), p.stdout
    table = rows(p)
    assert len(table) == (n_hosts or len(th.hosts))
    for row in table.values():        # figures in every deep column of every host
        assert row["COMPUTE"].endswith(("GF/s", "Ml/s")) and row["NET"].endswith("B/s"), p.stdout
        assert row["RTT"].endswith("ms") and row["CPUS"] == str(len(os.sched_getaffinity(0)))
    return took


def check_link(th, n_hosts=None, bad=1):
    with link_throttled(th, bad) as h:
        p, took = deep(th, n_hosts)
    assert "tbf" not in qdiscs(th, bad)
    assert p.returncode == 1, p.stdout + p.stderr
    nxt = th.hosts[(bad + 1) % (n_hosts or len(th.hosts))]
    m = re.search(rf"{re.escape(h.addr)} \[{re.escape(h.hostname)}\]: network ([\d.]+) ([kM])B/s, "
                  rf"median [\d.]+ [MG]B/s \((\d+)x slower\): link {re.escape(h.addr)}→"
                  rf"{re.escape(nxt.addr)}", verdict(p))
    assert m, p.stdout
    assert int(m.group(3)) >= 20                  # 10 Mbit/s against a veth's GB/s
    assert rows(p)[h.addr]["NET"].endswith("!")
    assert all(h.addr in ln for ln in fails(p)), p.stdout    # that host only
    return took


def check_cpu(th, n_hosts=None, bad=2):
    with cpu_throttled(th, bad) as h:
        p, took = deep(th, n_hosts)
    assert not os.path.exists(cgroup_path(th, bad))
    assert p.returncode == 1, p.stdout + p.stderr
    m = re.search(rf"{re.escape(h.addr)} \[{re.escape(h.hostname)}\]: compute [\d.]+ "
                  rf"(GFLOP|Mloop)/s per slot, median [\d.]+ \(([\d.]+)x slower\)", verdict(p))
    assert m and float(m.group(2)) >= 2.5, p.stdout
    assert rows(p)[h.addr]["COMPUTE"].endswith("!")
    assert all(h.addr in ln for ln in fails(p)), p.stdout
    return took


# --------------------------------------------------------------------------- CI: 3 hosts

def test_a_healthy_set_shows_no_outlier_three_times(testhosts):
    for _ in range(3):
        assert check_healthy(testhosts) < 20


def test_a_throttled_link_names_its_host_and_the_link(testhosts):
    check_link(testhosts)


def test_a_cpu_throttled_host_is_named(testhosts):
    check_cpu(testhosts)


def test_a_gloo_allreduce_is_timed_across_the_hosts(testhosts):
    pytest.importorskip("torch")
    p, _ = deep(testhosts, None, "--collective", "gloo", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^deep: allreduce \(gloo, 3 hosts, 4 MiB float32\): [\d.]+ ms each, "
                     r"[\d.]+ [kMG]B/s algorithm bandwidth$", p.stdout, re.M), p.stdout


# --------------------------------------------------------------------------- bench: 8, 32

@pytest.fixture(scope="module", params=[8, 32])
def big_set(request):
    if not BENCH:
        pytest.skip("set MPILAUNCH_BENCH=1 to run --deep over 8 and 32 hosts")
    why = hostsets.missing_prereqs()
    if why:
        pytest.skip(why)
    for prefix in ("mdb", "mdc", "mdd"):
        if hostsets.prefix_in_use(prefix):
            continue
        try:
            desc = hostsets.up(request.param, prefix=prefix, owner_pid=os.getpid())
        except hostsets.TestHostsError as exc:
            pytest.skip(f"{request.param} test hosts: {exc}")
        break
    else:
        pytest.skip("no free prefix for the bench set")
    try:
        yield TestHosts(desc)
    finally:
        hostsets.down(prefix)


def test_bench_three_runs_each(big_set):
    n = len(big_set.hosts)
    times = {"healthy": [check_healthy(big_set) for _ in range(3)],
             "link": [check_link(big_set, bad=6) for _ in range(3)],
             "cpu": [check_cpu(big_set, bad=2) for _ in range(3)]}
    out = os.path.join(os.environ.get("MPILAUNCH_BENCH_OUT", "/tmp"), "mpilaunch-deep-bench.txt")
    with open(out, "a") as f:
        for what, ts in times.items():
            f.write(f"{n} hosts, {what}: 3/3 as expected, " + ", ".join(f"{t:.1f}s" for t in ts) + "\n")


def test_preflight_deep_gates_a_launch(testhosts, tmp_path):
    """`mpilaunch --preflight deep` from host 1: over healthy hosts the job runs; with host 2's
    link throttled nothing starts, exit 1, the outlier named on stderr."""
    from helpers import EXAMPLES, REPO

    th = testhosts
    hf = th.hostfile(slots_per_host=1)

    def launch(logs):
        return th.run_in(0, [sys.executable, "-m", "mpilaunch", "--preflight", "deep", "--hostfile", hf,
                             "--ssh-args", f"-F {th.ssh_config}", "--no-scheduler", "--log_dir",
                             str(logs), os.path.join(EXAMPLES, "hello.py")],
                         timeout=180, env=clean_env(), cwd=REPO)

    p = launch(tmp_path / "ok")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("hello rank=") == 3
    with link_throttled(th, 1) as h:
        p = launch(tmp_path / "slow")
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"mpilaunch: preflight: {h.addr}: [{h.hostname}] network" in p.stderr
    assert p.stderr.rstrip().endswith("mpilaunch: not started (details: mpilaunch check --deep --table ...)")
    assert "hello rank=" not in p.stdout
    started = os.listdir(tmp_path / "slow") if (tmp_path / "slow").exists() else []
    assert [n for n in started if n.startswith("worker_")] == []


def test_a_host_that_fails_a_usual_check_is_left_out_and_its_agent_ends(testhosts):
    """Host 1's scheduler port is taken: its check fails, the other two are measured, and
    the agent its probe started is told to go."""
    th = testhosts
    h1 = th.hosts[0]
    holder = subprocess.Popen(
        ["ip", "netns", "exec", h1.netns, sys.executable, "-c",
         "import socket,time; s=socket.socket(); s.bind(('0.0.0.0', 38193)); s.listen(); "
         "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        p, _ = deep(th, None, "--master_port", "38193")
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 1, p.stdout + p.stderr
    assert [ln.split(":")[0] for ln in fails(p)] == [f"FAIL {h1.addr}"]
    assert verdict(p).startswith("mpilaunch check --deep: no outlier beyond 2.5x the median "
                                 "(2 host(s), 2 link(s);"), p.stdout
    assert rows(p)[h1.addr]["COMPUTE"] == "-"
    for _ in range(20):
        if not agents_left():
            break
        time.sleep(0.1)
    assert agents_left() == []
