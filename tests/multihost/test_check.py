"""`mpilaunch check`: pure parts, a local run, and real checks of the namespace test hosts."""
import errno
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time

import pytest

import mpilaunch
from mpilaunch.config import hostfile as hf
from mpilaunch import check as pf
from mpilaunch import net, ssh

from helpers.launch import clean_env, mpilaunch_argv
from helpers.ports import free_port


def check_cli(args, env=None, timeout=90):
    return subprocess.run(mpilaunch_argv("check", *args), env=env or clean_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


# --------------------------------------------------------------------------- pure parts

def test_parse_ssh_G_keeps_first_value():
    opts = ssh.parse_ssh_G("user root\nhostname 10.0.0.5\nport 2222\nidentityfile a\nidentityfile b\n")
    assert opts["hostname"] == "10.0.0.5" and opts["port"] == "2222" and opts["identityfile"] == "a"


@pytest.mark.parametrize("stderr,expect", [
    ("root@h: Permission denied (publickey).", "public key in ~/.ssh/authorized_keys"),
    ("Host key verification failed.", "known_hosts"),
    ("ssh: connect to host h port 2222: Connection refused", "ssh port 2222 closed — is sshd running there?"),
    ("ssh: connect to host h port 2222: Connection timed out", "no answer on ssh port 2222 within 3s"),
    ("ssh: Could not resolve hostname nope: Name or service not known", "does not resolve"),
    ("ssh: connect to host h port 2222: No route to host", "unreachable"),
    ("kex_exchange_identification: Connection closed by remote host", "MaxStartups"),
    ("something odd", "ssh failed (exit 255): something odd"),
])
def test_ssh_errors_become_one_line_with_a_fix(stderr, expect):
    msg = ssh.classify_ssh_error("Warning: noise\n" + stderr + "\n", 2222, 3.0)
    assert expect in msg and "\n" not in msg


def test_port_messages():
    assert ssh.port_message(errno.ECONNREFUSED, 2222, 5, "SSHD_PORT/--ssh-port") == \
        "ssh port 2222 closed — is sshd running there? (SSHD_PORT/--ssh-port)"
    assert "within 5s" in ssh.port_message(errno.ETIMEDOUT, 22, 5, "x")
    assert "unreachable" in ssh.port_message(errno.EHOSTUNREACH, 22, 5, "x")


def test_remote_command_survives_the_remote_shell():
    """The probe is one argv element for ssh; the remote shell must split it back exactly."""
    argv = [sys.executable, "-c", pf.PROBE_CODE, json.dumps({"script": "/a b/it's \"x\".py", "t": 1})]
    line = ssh.remote_command(argv)
    assert shlex.split(line) == argv
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60)
    probe = pf.parse_probe_output(out.stdout)
    assert probe is not None, out.stderr
    assert probe["mpilaunch"] == mpilaunch.__version__ and probe["script"] is False


def test_ssh_argv_is_batch_mode_with_connect_timeout():
    cmd = ssh.ssh_argv("node-b", 2222, ["-F", "cfg"], 2.5, "true")
    assert cmd == ["ssh", "-p", "2222", "-F", "cfg", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3",
                   "-T", "node-b", "true"]


def _params(**kw):
    base = dict(hosts=(hf.Host("a", 2), hf.Host("b", 2)), np=4, hosts_source="--hostfile=H", np_source="--np")
    base.update(kw)
    return pf.Params(**base)


def test_slots_cover_np():
    assert pf.check_slots(_params()).status == pf.OK
    bad = pf.check_slots(_params(np=5))
    assert bad.status == pf.FAIL and bad.host == ""
    assert "np 5 (from --np) is more than the 4 slot(s) of --hostfile=H (a: 2, b: 2)" in bad.message
    assert "--oversubscribe" in bad.message
    assert pf.check_slots(_params(np=5, oversubscribe=True)).status == pf.OK


def test_backlog_warning_only_for_large_jobs():
    assert pf.backlog_needed(63) is None
    assert pf.backlog_needed(64) == 4096 and pf.backlog_needed(10000) == 10000
    small = pf.evaluate_sysctl("h", "1.2.3.4", {"net.core.somaxconn": 128}, 8)
    assert all(r.status != pf.WARN for r in small)
    big = pf.evaluate_sysctl("h", "1.2.3.4", {"net.core.somaxconn": 4096,
                                               "net.ipv4.tcp_max_syn_backlog": 2048}, 128)
    status = {r.check: r.status for r in big}
    assert status == {"somaxconn": pf.OK, "syn-backlog": pf.WARN}
    warn = [r for r in big if r.status == pf.WARN][0]
    assert "net.ipv4.tcp_max_syn_backlog=2048 is below 4096" in warn.message
    assert "sysctl -w net.ipv4.tcp_max_syn_backlog=65535" in warn.message
    assert warn.ok  # a warning does not fail the check


def test_probe_evaluation_names_each_mismatch():
    p = _params(mpirun="/opt/ompi/bin/mpirun", mpi_version=(5, 0, 11), master_port=8118,
                script="/job/train.py", python="/usr/bin/python3")
    good = {"exe": "/usr/bin/python3", "mpilaunch": mpilaunch.__version__, "mpi4py": "4.1.2",
            "mpirun_rc": 0, "mpirun_out": "mpirun (Open MPI) 5.0.11\n", "port_free": True,
            "script": True, "sysctl": {}}
    assert [r for r in pf.evaluate_probe("a", "", good, p, True) if r.status == pf.FAIL] == []
    bad = dict(good, mpilaunch="0.0.9", mpi4py_err="ModuleNotFoundError: No module named 'mpi4py'",
               mpirun_out="mpirun (Open MPI) 4.1.4\n", port_free=False, port_err="Address already in use",
               script=False)
    fails = {r.check: r.message for r in pf.evaluate_probe("a", "", bad, p, True) if r.status == pf.FAIL}
    assert set(fails) == {"mpilaunch", "mpi4py", "mpirun", "script", "sched-port"}
    assert f"mpilaunch 0.0.9 there, {mpilaunch.__version__} here" in fails["mpilaunch"]
    assert "Open MPI 4.1.4 there, 5.0.11 here" in fails["mpirun"]
    assert "port 8118 is not free on rank 0's host" in fails["sched-port"]
    assert "/job/train.py not found there" in fails["script"]
    # the scheduler port is only rank 0's host's business
    assert {r.check for r in pf.evaluate_probe("b", "", bad, p, False) if r.status == pf.FAIL} == \
        {"mpilaunch", "mpi4py", "mpirun", "script"}
    missing = dict(good, mpirun_err="FileNotFoundError: [Errno 2] No such file")
    msg = [r.message for r in pf.evaluate_probe("a", "", missing, p, True) if r.check == "mpirun"][0]
    assert "/opt/ompi/bin/mpirun does not run there" in msg


def test_labels_and_report_caps_repeated_failures():
    r = pf.CheckResult("node-b", "10.231.0.12", "ssh-port", pf.FAIL, "ssh port 2222 closed")
    assert r.line() == "node-b (10.231.0.12): ssh port 2222 closed"
    assert pf.CheckResult("10.0.0.1", "10.0.0.1", "ssh", pf.FAIL, "x").label == "10.0.0.1"
    many = [pf.CheckResult(f"n{i}", "", "ssh-port", pf.FAIL, "closed") for i in range(30)]
    lines = pf.report_lines(many, 30, 1.0, table=False, max_per_check=5)
    assert sum(1 for ln in lines if ln.startswith("FAIL n")) == 5
    assert "FAIL ... and 25 more host(s) with the same ssh-port problem" in lines
    assert lines[-1].startswith("mpilaunch check: FAILED — 30 of 30 host(s) failed (ssh-port 30)")
    assert not any(ln.startswith("HOST") for ln in lines)
    assert any(ln.startswith("HOST") for ln in pf.report_lines(many[:3], 3, 1.0))  # small: a table


def test_parallel_map_is_bounded_and_keeps_errors():
    live, peak, lock = [0], [0], threading.Lock()

    def fn(i):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        if i == 7:
            raise RuntimeError("boom")
        return i * 2

    t0 = time.monotonic()
    out = ssh.parallel_map(fn, list(range(200)), 50)
    assert time.monotonic() - t0 < 2.0          # 200 x 50 ms with 50 threads: ~0.2 s
    assert peak[0] <= 50
    assert isinstance(out[7], RuntimeError) and out[8] == 16


def test_is_here():
    assert net.is_here("localhost", [])
    assert net.is_here("anything", ["127.0.1.1"])
    assert net.is_here(socket.gethostname(), [])
    assert not net.is_here("192.0.2.1", ["192.0.2.1"])     # TEST-NET-1: never ours


def test_resolve_times_out_and_fails_cleanly(monkeypatch):
    addrs, why = ssh.resolve("localhost", 5)              # /etc/hosts: no DNS query
    assert addrs and why is None

    def refuse(*a, **kw):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(ssh.socket, "getaddrinfo", refuse)
    assert ssh.resolve("node-zz", 5) == (None, "Name or service not known")

    def hang(*a, **kw):
        time.sleep(3)
        return []

    monkeypatch.setattr(ssh.socket, "getaddrinfo", hang)
    t0 = time.monotonic()
    addrs, why = ssh.resolve("node-zz", 0.3)
    assert addrs is None and "name lookup took more than 0.3s" in why
    assert time.monotonic() - t0 < 1.5


# --------------------------------------------------------------------------- command, this machine

def test_check_localhost_passes_without_ssh(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    # a port free now (38190 was fixed: inside the ephemeral range, any connection may hold it)
    p = check_cli(["-H", "localhost:2", "--master_port", free_port(), str(script)])
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1].startswith("mpilaunch check: OK — 1 host(s) passed")
    row = [ln for ln in lines if ln.startswith("localhost")][0].split()
    # resolve ok, ssh-port and ssh skipped (local), then python .. syn-backlog ok
    assert row[2:] == ["ok", "-", "-", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok"], p.stdout


def _no_network(argv):
    """argv in a new, empty network namespace: a DNS lookup fails at once and sends nothing."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare -n")
    return ["unshare", "-n"] + argv


def test_check_names_np_beyond_slots_and_unresolvable_host():
    t0 = time.monotonic()
    p = subprocess.run(_no_network(mpilaunch_argv("check", "-H", "localhost:2,no-such-host.invalid:1", "-np", "5",
                                                  "--timeout", "5")),
                       env=clean_env(), capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    fails = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL ")]
    assert len(fails) == 2, p.stdout
    assert fails[0].startswith("FAIL job: np 5 (from --np) is more than the 3 slot(s) of -H")
    assert fails[1].startswith("FAIL no-such-host.invalid: does not resolve")
    assert took < 20


@pytest.mark.parametrize("args,expected", [
    (["--timeout", "0"], "--timeout='0': out of range; give a number of seconds, more than 0"),
    (["--timeout", "soon"], "--timeout='soon': not a number; give a number of seconds, more than 0"),
    (["--parallel", "0"], "--parallel='0': out of range; give a whole number at least 1"),
    (["-H", "bad host"], "-H item 1: 'bad host' is not a valid host name"),
])
def test_usage_errors_exit_2(args, expected):
    p = check_cli(args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == "mpilaunch: error: " + expected


def test_run_checks_from_a_launch_config_is_ssh_only():
    from mpilaunch.config import launchconfig, options

    args = options.parser().parse_args(["-H", "localhost:1", "--no-python", "true"])
    cfg = launchconfig.build(args, {})
    results = pf.run_checks(cfg, timeout=5)
    assert {r.check for r in results} == {"slots", "resolve", "ssh-port", "ssh"}
    assert not pf.failed(results)


# --------------------------------------------------------------------------- real test hosts

def _args(th, hostfile, *extra):
    return ["--hostfile", hostfile, "--ssh-args", f"-F {th.ssh_config}", *extra]


def _fails(stdout):
    return [ln for ln in stdout.splitlines() if ln.startswith("FAIL ")]


@pytest.mark.multinode
def test_all_three_hosts_pass_from_outside(testhosts):
    hf_ = testhosts.hostfile(slots_per_host=2)
    p = check_cli(_args(testhosts, hf_, "--master_port", "38191"))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {ln.split()[0]: ln.split() for ln in p.stdout.splitlines() if ln.startswith("10.231.0.")}
    assert set(rows) == {h.addr for h in testhosts.hosts}
    for h in testhosts.hosts:
        assert rows[h.addr][2:9] == ["ok"] * 7, p.stdout   # resolve .. mpirun, all over ssh
    assert rows[testhosts.hosts[0].addr][10] == "ok"        # sched-port on rank 0's host only
    assert rows[testhosts.hosts[1].addr][10] == "-"


@pytest.mark.multinode
def test_all_three_hosts_pass_from_host1_which_is_local(testhosts):
    hf_ = testhosts.hostfile(slots_per_host=2)
    p = testhosts.run_in(0, mpilaunch_argv("check", *_args(testhosts, hf_, "--master_port", "38191",
                                                             "--mpirun", "/usr/bin/mpirun")),
                         timeout=90, env=clean_env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Open MPI 4.1.4" in p.stdout.splitlines()[0]
    row = [ln.split() for ln in p.stdout.splitlines() if ln.startswith(testhosts.hosts[0].addr)][0]
    assert row[3:5] == ["-", "-"]                          # local: no ssh


@pytest.mark.multinode
def test_killed_sshd_is_named_within_its_time_out(testhosts_healthy):
    th = testhosts_healthy
    dead = th.hosts[2]
    th.kill_sshd(dead)
    hf_ = th.hostfile(slots_per_host=1)
    t0 = time.monotonic()
    p = check_cli(_args(th, hf_, "--timeout", "4"))
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    assert _fails(p.stdout) == [
        f"FAIL {dead.addr}: ssh port {th.port} closed — is sshd running there? (SSHD_PORT/--ssh-port)"]
    assert took < 4 + 6, took


@pytest.mark.multinode
def test_unresolvable_host_and_np_beyond_slots_among_real_hosts(testhosts, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{h.addr} slots=1\n" for h in testhosts.hosts) + "node-zz.invalid slots=1\n")
    # from inside host 1 (no route out): the failed lookup of node-zz stays on this machine
    p = testhosts.run_in(0, mpilaunch_argv("check", *_args(testhosts, str(hosts), "-np", "6", "--timeout", "5")),
                         timeout=90, env=clean_env())
    assert p.returncode == 1, p.stdout + p.stderr
    fails = _fails(p.stdout)
    assert len(fails) == 2, p.stdout
    assert fails[0].startswith(f"FAIL job: np 6 (from --np) is more than the 4 slot(s) of --hostfile={hosts}")
    assert fails[1].startswith("FAIL node-zz.invalid: does not resolve")
    assert "3 host(s) passed" not in p.stdout and "1 of 4 host(s) failed" in p.stdout


@pytest.mark.multinode
def test_busy_scheduler_port_and_missing_python_are_named(testhosts, tmp_path):
    h1 = testhosts.hosts[0]
    holder = subprocess.Popen(
        ["ip", "netns", "exec", h1.netns, sys.executable, "-c",
         "import socket,sys,time; s=socket.socket(); s.bind(('0.0.0.0', 38192)); s.listen(); "
         "print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        hf_ = testhosts.hostfile(slots_per_host=1, n_hosts=2)
        p = check_cli(_args(testhosts, hf_, "--master_port", "38192"))
        assert p.returncode == 1, p.stdout + p.stderr
        assert _fails(p.stdout) == [
            f"FAIL {h1.addr}: scheduler/master port 38192 is not free on rank 0's host (Address already in use) "
            "— stop what holds it, or pass another --master_port (0 = any free port)"]
    finally:
        holder.kill()
        holder.wait()
    p = check_cli(_args(testhosts, hf_, "--python", "/nonexistent/bin/python3"))
    assert p.returncode == 1
    fails = _fails(p.stdout)
    assert len(fails) == 2 and all("/nonexistent/bin/python3 not found there" in f for f in fails), p.stdout
