"""--host-discovery-script (mpilaunch/attempts/discovery.py): the script's output and its failures,
the rules between attempts (cool-down after repeated failures, preflight of new hosts, the
previous hosts kept when the script fails, the end when no host is left), and the first
attempt's usage errors through the CLI."""
import collections
import stat

import psutil
import pytest

from helpers.launch import run_cli
from helpers.procs import wait_for
from mpilaunch.config import resilience
from mpilaunch.config.resilience import Resilience
from mpilaunch.attempts import discovery
from mpilaunch.attempts.nextattempt import Between
from mpilaunch.supervise.attempt import AttemptRecord
from mpilaunch.errors import UsageError
from mpilaunch.config.hostfile import Host

C = collections.namedtuple("C", "hosts np master_addr hosts_source resilience", defaults=(None,))
A, B, D = Host("10.0.0.1", 2), Host("10.0.0.2", 2), Host("10.0.0.3", 2)


def executable(tmp_path, text, name="discover.sh"):
    path = tmp_path / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# ---------------------------------------------------------------- the script's output

def test_parse_host_and_host_slots_in_order():
    out = "node-a:4\n\n  10.0.0.2  \nnode-c:1\n"
    assert discovery.parse(out, "/d.sh") == (Host("node-a", 4), Host("10.0.0.2", 1), Host("node-c", 1))
    assert discovery.parse("", "/d.sh") == ()


@pytest.mark.parametrize("line", ["a:0", "a:x", "a:", "a:-1", "a slots=2", "-a", "a:2:3", ":2"])
def test_parse_a_malformed_line_is_named(line):
    with pytest.raises(discovery.DiscoveryError) as e:
        discovery.parse(f"ok:1\n{line}\n", "/d.sh")
    assert str(e.value) == (f"/d.sh printed line 2 {line!r}: give host or host:slots (slots a "
                            f"whole number from 1 to {discovery.hf.MAX_SLOTS})")


def test_parse_a_host_twice():
    with pytest.raises(discovery.DiscoveryError) as e:
        discovery.parse("a:1\nb\na:2\n", "/d.sh")
    assert str(e.value) == "/d.sh printed line 3 'a:2': host a listed twice"


def test_run_script_output_failure_and_timeout(tmp_path):
    ok = executable(tmp_path, "#!/bin/sh\necho a:2\necho b\n", "ok.sh")
    assert discovery.discover(ok) == (Host("a", 2), Host("b", 1))
    bad = executable(tmp_path, "#!/bin/sh\necho first >&2\necho 'no API server' >&2\nexit 3\n", "bad.sh")
    with pytest.raises(discovery.DiscoveryError) as e:
        discovery.run_script(bad)
    assert str(e.value) == f"{bad} exited with status 3: no API server"
    slow = executable(tmp_path, "#!/bin/sh\nsleep 30 &\nwait\n", "slow.sh")
    with pytest.raises(discovery.DiscoveryError) as e:
        discovery.run_script(slow, timeout=0.3)
    assert str(e.value) == f"{slow} timed out after 0.3 s"
    killed = executable(tmp_path, "#!/bin/sh\nkill -9 $$\n", "killed.sh")
    with pytest.raises(discovery.DiscoveryError) as e:
        discovery.run_script(killed)
    assert str(e.value) == f"{killed} ended by SIGKILL"


def test_a_timed_out_script_leaves_nothing(tmp_path):
    pidfile = tmp_path / "pid"
    slow = executable(tmp_path, f"#!/bin/sh\nsleep 30 &\necho $! > {pidfile}\nwait\n")
    with pytest.raises(discovery.DiscoveryError):
        discovery.run_script(slow, timeout=0.5)
    pid = int(pidfile.read_text())
    # its background child went with it (a zombie until whoever inherited it reaps it)
    assert wait_for(lambda: _gone(pid), 5)


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_script_path(tmp_path):
    ok = executable(tmp_path, "#!/bin/sh\n")
    assert resilience.script_path(ok) == ok
    plain = tmp_path / "plain.sh"
    plain.write_text("echo a\n")
    for raw in (str(plain), str(tmp_path / "missing"), str(tmp_path), " "):
        with pytest.raises(UsageError) as e:
            resilience.script_path(raw)
        assert str(e.value) == f"--host-discovery-script={raw}: not an executable file"


# ---------------------------------------------------------------- the first attempt

def disc(outputs, user_np=None, bad=None, now=None):
    """A Discovery whose script prints ``outputs`` in turn (an exception: it fails) and whose
    preflight fails the hosts in ``bad`` (name -> why); records which hosts were preflighted."""
    outputs = list(outputs)
    clock = now or [0.0]

    def runner():
        item = outputs.pop(0)
        if isinstance(item, Exception):
            raise item
        return discovery.parse(item, "/d.sh")

    def preflight(cfg, hosts):
        d.checked.append([h.name for h in hosts])
        return {h.name: (bad or {})[h.name] for h in hosts if h.name in (bad or {})}

    d = discovery.Discovery("/d.sh", user_np, clock=lambda: clock[0], runner=runner,
                            preflight=preflight)
    d.checked = []
    return d


def test_first_replaces_the_hosts_and_the_world_size():
    cfg = C((Host("localhost", 8),), 8, None, "localhost")
    new = disc(["10.0.0.1:2\n10.0.0.2:2\n"]).first(cfg)
    assert new.hosts == (A, B) and new.np == 4
    assert new.hosts_source == "--host-discovery-script /d.sh"
    assert disc(["10.0.0.1:2\n10.0.0.2:2\n"], user_np=3).first(cfg).np == 3      # -np fits
    assert disc(["10.0.0.1:2\n10.0.0.2:2\n"], user_np=6).first(cfg).np == 4      # it does not


@pytest.mark.parametrize("output, message", [
    (discovery.DiscoveryError("/d.sh exited with status 1: boom"),
     "--host-discovery-script: /d.sh exited with status 1: boom"),
    ("a:1\nb:zero\n", "--host-discovery-script: /d.sh printed line 2 'b:zero': give host or "
                      f"host:slots (slots a whole number from 1 to {discovery.hf.MAX_SLOTS})"),
    ("\n", "--host-discovery-script: /d.sh listed no host"),
])
def test_first_fails_with_one_line(output, message):
    with pytest.raises(UsageError) as e:
        disc([output]).first(C((A,), 2, None, "hostfile"))
    assert str(e.value) == message


# ---------------------------------------------------------------- between attempts

def test_a_host_failed_twice_cools_down_then_comes_back():
    now = [0.0]
    d = disc(["10.0.0.1:2\n10.0.0.2:2\n"] * 4, now=now)
    d.first(C((A,), 2, None, "hostfile"))
    said = []
    # lost once: still listed, so preflighted again (passes) and used
    hosts, out = d.next_hosts(1, (A, B), ["10.0.0.2"], None, said.append)
    assert hosts == (A, B) and out == {} and d.checked == [["10.0.0.2"]] and said == []
    # lost a second time: left out although listed
    now[0] = 10.0
    hosts, out = d.next_hosts(2, (A, B), ["10.0.0.2"], None, said.append)
    assert hosts == (A,) and out == {"10.0.0.2": "cooling down (300 s left)"}
    assert said == ["host 10.0.0.2 failed 2 times: left out for 300 s"]
    now[0] = 10.0 + discovery.COOL_DOWN
    hosts, out = d.next_hosts(3, (A,), [], None, said.append)
    assert hosts == (A, B) and out == {}         # the cool-down is over; seen before: no check
    assert discovery.FAILS_TO_COOL == 2


def test_new_hosts_are_preflighted_and_a_failing_one_left_out():
    d = disc(["10.0.0.1:2\n10.0.0.2:2\n", "10.0.0.1:2\n10.0.0.3:2\nnode-4\n"],
             bad={"node-4": "ssh: port 22 does not answer"})
    d.first(C((A,), 2, None, "hostfile"))
    said = []
    hosts, out = d.next_hosts(1, (A, B), ["10.0.0.2"], None, said.append)
    assert d.checked == [["10.0.0.3", "node-4"]]           # not 10.0.0.1: it ran attempt 0
    assert d.last_checked == ["10.0.0.3", "node-4"]
    assert hosts == (A, D) and out == {"node-4": "preflight: ssh: port 22 does not answer"}
    assert said == ["host node-4 left out of attempt 1: preflight: ssh: port 22 does not answer"]
    assert d.fails == {"10.0.0.2": 1, "node-4": 1}


def test_a_failing_script_keeps_the_previous_hosts():
    d = disc(["10.0.0.1:2\n10.0.0.2:2\n",
              discovery.DiscoveryError("/d.sh timed out after 30 s")])
    d.first(C((A,), 2, None, "hostfile"))
    said = []
    hosts, out = d.next_hosts(1, (A, B), [], None, said.append)
    assert hosts == (A, B) and out == {}
    assert said == ["/d.sh timed out after 30 s; attempt 1 keeps the hosts of attempt 0"]


def Att(lost, rank_hosts=None):
    return AttemptRecord(0, 1, lost=tuple(lost), rank_hosts=rank_hosts or {})


def lr(m=None):
    return Resilience(2, 0.0, None, None, True, "/logs", False, True, False, m)


def test_between_a_replacement_host(capsys):
    d = disc(["10.0.0.1:2\n10.0.0.2:2\n", "10.0.0.1:2\n10.0.0.3:2\n"])
    cfg = d.first(C((A,), 2, "10.0.0.1", "hostfile"))
    att = Att(["10.0.0.2"])
    new, note = discovery.between(d, Between(cfg._replace(resilience=lr()), None, att, 1))
    assert new.hosts == (A, D) and new.np == 4 and new.master_addr is None
    assert new.resilience.rank0_here is False
    assert note == ("; host discovery: attempt 1 on 10.0.0.1, 10.0.0.3 (was 10.0.0.1, "
                        "10.0.0.2), world size 4")
    assert capsys.readouterr().err == ("mpilaunch: host discovery: attempt 1 runs on 10.0.0.1, "
                                       "10.0.0.3, world size 4\n")


def test_between_the_same_hosts_say_nothing(capsys):
    d = disc(["10.0.0.1:2\n10.0.0.2:2\n"] * 2)
    cfg = d.first(C((A,), 2, None, "hostfile"))
    new, note = discovery.between(d, Between(cfg._replace(resilience=lr()), cfg.master_addr, Att([]), 1))
    assert new.hosts == (A, B) and capsys.readouterr().err == "" and note == ""


@pytest.mark.parametrize("output, m, said", [
    ("", None, "no host left for attempt 1: the job ends with attempt 0's status"),
    ("10.0.0.1:2\n", 2, "1 host(s) left, fewer than --min-hosts 2 for attempt 1: the job ends "
                        "with attempt 0's status"),
])
def test_between_too_few_hosts_end_the_job(output, m, said, capsys):
    d = disc(["10.0.0.1:2\n10.0.0.2:2\n", output])
    cfg = d.first(C((A,), 2, None, "hostfile"))
    assert discovery.between(d, Between(cfg._replace(resilience=lr(m)), cfg.master_addr, Att(["10.0.0.2"]), 1)) is None
    assert capsys.readouterr().err == f"mpilaunch: host discovery: {said}\n"


# ---------------------------------------------------------------- through the CLI

@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("open('STARTED', 'w').close()\n")
    return str(path)


def one_line(proc, tmpdir, tmp_path, expected):
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["mpilaunch: error: " + expected], proc.stderr
    assert list(tmpdir.iterdir()) == [] and not (tmp_path / "STARTED").exists()


def test_cli_a_malformed_line_before_the_first_attempt(tmp_path, script):
    d = executable(tmp_path, "#!/bin/sh\necho localhost:2\necho 'localhost slots=2'\n")
    proc, tmpdir = run_cli(["--host-discovery-script", d, script], tmp_path)
    one_line(proc, tmpdir, tmp_path, f"--host-discovery-script: {d} printed line 2 "
             f"'localhost slots=2': give host or host:slots (slots a whole number from 1 to "
             f"{discovery.hf.MAX_SLOTS})")


def test_cli_not_executable(tmp_path, script):
    proc, tmpdir = run_cli(["--host-discovery-script", script, script], tmp_path)
    one_line(proc, tmpdir, tmp_path, f"--host-discovery-script={script}: not an executable file")


def test_cli_the_first_attempt_runs_on_the_scripts_hosts(tmp_path, script):
    d = executable(tmp_path, "#!/bin/sh\necho localhost:3\n")
    proc, _ = run_cli(["--dry-run", "--no-scheduler", "--host-discovery-script", d, script],
                      tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert " -np 3 " in proc.stdout and "#   localhost slots=3" in proc.stdout, proc.stdout
    assert f"# hosts: --host-discovery-script {d}" in proc.stdout
