"""`mpilaunch job`: the ModelArts-like entrypoint run on every host with VC_* variables."""
import json
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from mpilaunch import contract
from mpilaunch.config import launchconfig, options
from mpilaunch.errors import UsageError
from mpilaunch.job import command as jcmd
from mpilaunch.job import peer as jpeer
from mpilaunch.job import spec as jspec
from mpilaunch.job import waiter as jwait
from mpilaunch.job import worker0 as jw0

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import HYDRA
from helpers.procs import wait_for

ENTRY_SH = os.path.join(REPO, "scripts", "modelarts_entry.sh")

RANK_SCRIPT = """\
import json, os, socket, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
out, rank = sys.argv[1], os.environ["RANK"]
with open(os.path.join(out, "rank%s.json" % rank), "w") as fh:
    json.dump({"host": socket.gethostname(), "rank": rank, "local": os.environ["LOCAL_RANK"],
               "vc": os.environ.get("VC_WORKER_HOSTS")}, fh)
if len(sys.argv) > 2 and sys.argv[2] == "fail" and rank == "1":
    sys.exit(3)
if len(sys.argv) > 2 and sys.argv[2] == "sleep":
    time.sleep(120)
"""


# --------------------------------------------------------------------------- pure parts

def _args(*argv):
    return options.parser(options.JOB).parse_args(list(argv) or ["x.py"])


@pytest.mark.parametrize("env,expected", [
    ({"VC_WORKER_HOSTS": "a,b,c", "VC_TASK_INDEX": "5"}, "VC_TASK_INDEX='5': out of range; give this host's index in VC_WORKER_HOSTS (3 hosts), 0 to 2"),
    ({"VC_WORKER_HOSTS": "a,b,c", "VC_TASK_INDEX": "-1"}, "VC_TASK_INDEX='-1': out of range; give this host's index in VC_WORKER_HOSTS (3 hosts)"),
    ({"VC_WORKER_HOSTS": "a,b,c"}, "VC_TASK_INDEX is not set (VC_WORKER_HOSTS lists 3 hosts)"),
    ({"VC_WORKER_HOSTS": "a,b", "VC_TASK_INDEX": "one"}, "VC_TASK_INDEX='one': not a whole number"),
    ({"VC_TASK_INDEX": "0"}, "VC_TASK_INDEX=0 is set but VC_WORKER_HOSTS is not"),
    ({"VC_WORKER_HOSTS": "a,,b", "VC_TASK_INDEX": "0"}, "VC_WORKER_HOSTS item 2: empty host name"),
    ({"VC_WORKER_HOSTS": "a,a", "VC_TASK_INDEX": "0"}, "host 'a' is listed twice"),
    ({"VC_WORKER_HOSTS": "a,b", "VC_TASK_INDEX": "0", "MA_NUM_GPUS": "0"}, "MA_NUM_GPUS='0': out of range; give a whole number"),
    ({"VC_WORKER_HOSTS": "a,b", "VC_TASK_INDEX": "0", "SSHD_PORT": "ssh"}, "SSHD_PORT='ssh': not a whole number; give a port between 1 and 65535"),
])
def test_bad_platform_variables_are_named(env, expected):
    with pytest.raises(UsageError) as err:
        jspec.job_spec(env, _args())
    assert expected in str(err.value)


def test_job_hosts_with_ssh_ports_of_their_own(tmp_path):
    """VC_WORKER_HOSTS=a@2201,a@2202: containers sharing one address; the job keeps the ports
    (its peer calls and worker-0's hostfile), and they tell two jobs apart."""
    from mpilaunch.job import worker0

    env = {"VC_WORKER_HOSTS": "a@2201,a@2202,b", "VC_TASK_INDEX": "1", "SSHD_PORT": "2222"}
    spec = jspec.job_spec(env, _args())
    assert (spec.hosts, spec.ports) == (("a", "a", "b"), (2201, 2202, None))
    assert [spec.port(i) for i in range(3)] == [2201, 2202, 2222]
    assert spec.key != jspec.job_key(("a", "a", "b"), 2222)
    path = worker0.write_hostfile(spec, str(tmp_path))
    assert open(path).read() == "a slots=1 port=2201\na slots=1 port=2202\nb slots=1\n"


def test_job_spec_and_key():
    spec = jspec.job_spec({"VC_WORKER_HOSTS": "a, b ,c", "VC_TASK_INDEX": "2", "MA_NUM_GPUS": "8",
                        "SSHD_PORT": "2222"}, _args("--ssh-args", "-F cfg", "x.py"))
    assert spec.hosts == ("a", "b", "c") and spec.index == 2 and spec.slots == 8
    assert spec.ssh_port == 2222 and spec.ssh_extra == ("-F", "cfg") and spec.worker0 == "a"
    assert spec.socket_name(1) == f"mpilaunch-job-{spec.key}-1"
    assert spec.key == jspec.job_key(("a", "b", "c"), 2222)
    assert jspec.job_key(("a", "b"), 2222) != jspec.job_key(("a", "b"), 22) != jspec.job_key(("a", "b"), 22, "run-2")
    assert jspec.job_spec({}, _args()) is None  # no platform variables: a plain launch
    # flags beat variables, as in the launcher
    spec = jspec.job_spec({"VC_WORKER_HOSTS": "a", "VC_TASK_INDEX": "0", "MA_NUM_GPUS": "8", "SSHD_PORT": "1"},
                       _args("--local_worker_num", "2", "--ssh-port", "2200", "x.py"))
    assert spec.slots == 2 and spec.ssh_port == 2200
    with pytest.raises(UsageError, match="drop --hostfile"):
        jspec.job_spec({"VC_WORKER_HOSTS": "a", "VC_TASK_INDEX": "0"}, _args("--hostfile", "h", "x.py"))


# --------------------------------------------------------------------------- run and job agree

def _run_answer(env):
    """`mpilaunch` (run): (hosts, ssh port) or the UsageError message, for the same variables."""
    try:
        cfg = launchconfig.build(options.parser().parse_args(["--no-python", "true"]), env)
    except UsageError as exc:
        return str(exc)
    return tuple((h.name, h.slots) for h in cfg.hosts), cfg.ssh_port


def _job_answer(env):
    """`mpilaunch job` (worker-0's spec): the same shape, or the UsageError message."""
    try:
        spec = jspec.job_spec(dict(env, VC_TASK_INDEX="0"), _args("--no-python", "true"))
    except UsageError as exc:
        return str(exc)
    return tuple((h, spec.slots) for h in spec.hosts), spec.ssh_port


@pytest.mark.parametrize("extra,expected", [
    ({"SSHD_PORT": "ssh"}, "SSHD_PORT='ssh': not a whole number; give a port between 1 and 65535"),
    ({"SSHD_PORT": "70000"}, "SSHD_PORT='70000': out of range; give a port between 1 and 65535"),
    ({"MA_NUM_GPUS": "x"}, "MA_NUM_GPUS='x': not a whole number; give a whole number"),
    ({"MA_NUM_GPUS": "0"}, "MA_NUM_GPUS='0': out of range; give a whole number"),
])
def test_run_and_job_reject_a_bad_variable_with_the_same_message(extra, expected):
    env = dict({"VC_WORKER_HOSTS": "a,b"}, **extra)
    message = _run_answer(env)
    assert isinstance(message, str) and message.startswith(expected), message
    assert _job_answer(env) == message


@pytest.mark.parametrize("extra,expected", [
    ({"MA_NUM_GPUS": ""}, ((("a", 1), ("b", 1)), None)),          # blank = unset: 1 slot
    ({"MA_NUM_GPUS": " 4 ", "SSHD_PORT": "2222"}, ((("a", 4), ("b", 4)), 2222)),
    ({"SSHD_PORT": ""}, ((("a", 1), ("b", 1)), None)),
])
def test_run_and_job_read_the_same_answer(extra, expected):
    env = dict({"VC_WORKER_HOSTS": "a,b"}, **extra)
    assert _run_answer(env) == expected
    assert _job_answer(env) == expected


def test_run_and_job_reject_slots_in_vc_worker_hosts_alike():
    env = {"VC_WORKER_HOSTS": "localhost:2"}
    expected = "VC_WORKER_HOSTS: localhost:2: give plain host names; slots come from the per-host count"
    assert _run_answer(env) == expected
    assert _job_answer(env) == expected

def test_split_argv_leaves_a_modules_arguments_alone():
    args, rest = jcmd.split_argv(["--wait-hosts", "5", "-np", "2", "-m", "mod", "--wait-hosts", "1"])
    assert (args.wait_hosts, args.module, args.script_args) == ("5", "mod", ["--wait-hosts", "1"])
    assert rest == ["-np", "2", "-m", "mod", "--wait-hosts", "1"]


def test_split_argv_keeps_the_script_and_its_arguments():
    args, rest = jcmd.split_argv(["--wait-hosts", "30", "-np", "4", "--lost-after=9", "train.py",
                                "--wait-hosts", "1", "--lr", "0.1"])
    assert args.wait_hosts == "30" and args.lost_after == "9"
    assert rest == ["-np", "4", "train.py", "--wait-hosts", "1", "--lr", "0.1"]
    args, rest = jcmd.split_argv(["--wait-hosts", "5"])
    assert args.script is None and rest == []


def test_progress_prints_changes_and_repeats_slowly():
    lines = []
    pr = jw0.Progress(3, out=lines.append)
    pr.show(1, [("node-b", ""), ("node-c", "")], now=0.0)
    pr.show(1, [("node-b", ""), ("node-c", "")], now=0.5)
    pr.show(2, [("node-c", "ssh port 2222 closed")], now=1.0)
    pr.show(2, [("node-c", "ssh port 2222 closed")], now=1.0 + jw0.REPEAT_STATUS_EVERY)
    pr.show(3, [], now=12.0)
    assert lines == ["1/3 hosts ready (waiting for node-b, node-c)",
                     "2/3 hosts ready (waiting for node-c: ssh port 2222 closed)",
                     "2/3 hosts ready (waiting for node-c: ssh port 2222 closed)",
                     "3/3 hosts ready"]


def test_wait_for_peers_rounds_are_paced_and_bounded(capsys):
    spec = jspec.JobSpec(("w0", "late", "never"), 0, 1, None, (), "k")
    calls = []

    def call(spec_, i, msg, python, timeout):
        calls.append((time.monotonic(), i, msg["op"]))
        if i == 1 and sum(1 for c in calls if c[1] == 1) >= 3:
            return jpeer.PeerReply(True, {"ok": True}, "")
        return jpeer.PeerReply(False, None, "not yet")

    t0 = time.monotonic()
    missing = jw0.wait_for_peers(spec, sys.executable, 3.5, call=call)
    took = time.monotonic() - t0
    assert missing == {2: "not yet"}
    assert 3.4 < took < 5.5
    rounds = sorted({round(t - t0) for t, i, _ in calls if i == 2})
    assert len(rounds) <= 5            # at most one round per second
    assert {op for _, _, op in calls} == {"hello"}
    err = capsys.readouterr().err
    assert "mpilaunch: 1/3 hosts ready (waiting for late, never)" in err
    assert "mpilaunch: 2/3 hosts ready (waiting for never: not yet)" in err


def test_notify_peers_retries_hosts_not_up_yet():
    spec = jspec.JobSpec(("w0", "slow", "gone"), 0, 1, None, (), "k")
    calls = []

    def call(spec_, i, msg, python, timeout):
        calls.append((i, msg))
        if i == 1 and sum(1 for c in calls if c[0] == 1) >= 2:
            return jpeer.PeerReply(True, {"ok": True}, "")
        return jpeer.PeerReply(False, None, "ssh works, but no `mpilaunch job` is waiting there yet")

    t0 = time.monotonic()
    failed = jw0.notify_peers(spec, 2, sys.executable, within=2.5, call=call)
    assert failed == {2: "ssh works, but no `mpilaunch job` is waiting there yet"}
    assert time.monotonic() - t0 < 4
    assert {m["op"] for _, m in calls} == {"done"} and {m["status"] for _, m in calls} == {2}
    assert sum(1 for i, _ in calls if i == 2) <= 3        # one round a second


def _peer(spec, index, message):
    """Run the peer one-liner locally (what worker-0 runs over ssh)."""
    p = subprocess.run([sys.executable, "-c", jpeer.PEER_CODE, spec.socket_name(index), json.dumps(message)],
                       capture_output=True, text=True, timeout=30)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith(contract.PEER_PREFIX)][0]
    return p.returncode, json.loads(line[len(contract.PEER_PREFIX):])


def _serve(waiter):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("status", waiter.serve()), daemon=True)
    t.start()
    return t, box


def test_waiter_protocol_hello_then_done(capsys):
    spec = jspec.JobSpec(("w0", "me"), 1, 1, None, (), "k%d" % os.getpid())
    rc, reply = _peer(spec, 1, {"op": "hello", "key": spec.key})
    assert rc == 3 and reply["error"] == "not-listening"          # nobody waits yet
    waiter = jwait.Waiter(spec, alive=lambda: True, lost_after=30, contact_within=30)
    waiter.bind()
    with pytest.raises(UsageError, match="already waits on this host"):
        jwait.Waiter(spec, alive=lambda: True, lost_after=30, contact_within=30).bind()
    t, box = _serve(waiter)
    assert _peer(spec, 1, {"op": "hello", "key": "other-job"})[1] == {"ok": False, "error": "wrong job key"}
    rc, reply = _peer(spec, 1, {"op": "hello", "key": spec.key})
    assert rc == 0 and reply["ok"] and reply["index"] == 1 and reply["pid"] == os.getpid()
    assert _peer(spec, 1, {"op": "done", "status": 7, "key": spec.key})[1]["ok"]
    t.join(10)
    assert box["status"] == 7
    assert "reports the job ended with status 7" in capsys.readouterr().err


def test_waiter_gives_up_when_worker0_is_lost():
    spec = jspec.JobSpec(("w0", "me"), 1, 1, None, (), "lost%d" % os.getpid())
    state = {"alive": True}
    waiter = jwait.Waiter(spec, alive=lambda: state["alive"], lost_after=1.5, contact_within=60, liveness_every=0.2)
    t, box = _serve(waiter)
    assert wait_for(lambda: waiter.sock is not None, 5)
    _peer(spec, 1, {"op": "hello", "key": spec.key})
    time.sleep(0.5)
    assert "status" not in box
    state["alive"] = False
    t0 = time.monotonic()
    t.join(10)
    assert box["status"] == jwait.LOST_STATUS and time.monotonic() - t0 < 4


def test_liveness_probes_scale_with_the_job():
    assert jwait.liveness_every(3) == jwait.LIVENESS_EVERY
    assert jwait.liveness_every(10001) == 10000 / jwait.LIVENESS_MAX_RATE   # 500 s: 20 connects/s at worker-0


def test_waiter_gives_up_when_worker0_never_gets_in_touch():
    spec = jspec.JobSpec(("w0", "me"), 1, 1, None, (), "never%d" % os.getpid())
    waiter = jwait.Waiter(spec, alive=lambda: False, lost_after=60, contact_within=1.0, liveness_every=0.2)
    t0 = time.monotonic()
    assert waiter.serve() == jwait.LOST_STATUS
    assert 0.9 < time.monotonic() - t0 < 4


def test_cli_usage_errors_are_one_line(tmp_path):
    env = clean_env(VC_WORKER_HOSTS="a,b,c", VC_TASK_INDEX="5", MA_NUM_GPUS="1")
    for argv in (mpilaunch_argv("job", "x.py"), [ENTRY_SH, "x.py"]):
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2
        assert p.stderr == ("mpilaunch: error: VC_TASK_INDEX='5': out of range; give this host's index in "
                            "VC_WORKER_HOSTS (3 hosts), 0 to 2\n")
    p = subprocess.run(mpilaunch_argv("job", "--wait-hosts", "0", "x.py"), env=clean_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == ("mpilaunch: error: --wait-hosts='0': out of range; "
                                             "give a number of seconds, more than 0\n")


def test_without_platform_variables_job_is_a_plain_launch(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    p = subprocess.run([ENTRY_SH, "-np", "2", "--no-scheduler", "--master_port", "0",
                        "--log_dir", str(tmp_path / "logs"),
                        str(script), str(tmp_path)], env=clean_env(), capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(n for n in os.listdir(tmp_path / "logs") if not n.startswith(".")) == ["events.jsonl", "worker_0.log", "worker_1.log"]
    assert {json.load(open(tmp_path / f"rank{r}.json"))["local"] for r in (0, 1)} == {"0", "1"}


# --------------------------------------------------------------------------- real hosts

def _start(th, host, index, argv, tmp_path, wait_hosts=60, lost_after=None, mpi=None):
    """Start `mpilaunch job` in a host's namespaces, as the platform would on that host
    (``mpi``: a tests/helpers/mpis.py install: its interpreter and mpirun, the same on every host)."""
    h = th.host(host)
    env = clean_env(VC_WORKER_HOSTS=",".join(x.addr for x in th.hosts), VC_TASK_INDEX=index,
                    MA_NUM_GPUS=1, SSHD_PORT=th.port)
    if mpi is not None:   # PYTHONPATH: this tree's mpilaunch, not the one the venv has installed
        env.update(MPILAUNCH_PYTHON=mpi.python, MPILAUNCH_MPIRUN=mpi.mpirun, PYTHONPATH=REPO)
    job = [ENTRY_SH, "--wait-hosts", str(wait_hosts)]
    if lost_after is not None:
        job += ["--lost-after", str(lost_after)]
    job += ["--ssh-args", f"-F {th.ssh_config}", "--master_port", "38110", "--log_dir",
            str(tmp_path / "logs"), *argv]
    out = open(tmp_path / f"entry{index}.log", "w")
    cmd = ["ip", "netns", "exec", h.netns] + job
    if psutil.pid_exists(h.sshd_pid):
        cmd = ["nsenter", "-t", str(h.sshd_pid), "-u", "--"] + cmd
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=tmp_path)


def _finish(procs, timeout):
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return codes


def _job_processes(marker):
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in a for a in (p.info["cmdline"] or [])):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.multinode
def test_job_with_a_late_host_succeeds_everywhere(testhosts_healthy, tmp_path):
    th = testhosts_healthy
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    late = th.hosts[2]
    th.kill_sshd(late)               # its container (sshd + entrypoint) comes up late
    procs = [_start(th, 0, 0, [str(script), str(tmp_path)], tmp_path),
             _start(th, 1, 1, [str(script), str(tmp_path)], tmp_path)]
    # the late host comes up once worker-0 has seen it missing (was: a fixed 4 s, which on a
    # loaded machine could pass before worker-0 had even reached host 2)
    missing = f"mpilaunch: 2/3 hosts ready (waiting for {late.addr}: ssh port {th.port} closed"
    wait_for(lambda: missing in (tmp_path / "entry0.log").read_text(), 60)
    th.start_sshd(late)
    procs.append(_start(th, 2, 2, [str(script), str(tmp_path)], tmp_path))
    codes = _finish(procs, 120)
    logs = [open(tmp_path / f"entry{i}.log").read() for i in range(3)]
    assert codes == [0, 0, 0], "\n----\n".join(logs)
    w0 = logs[0]
    assert f"mpilaunch: 2/3 hosts ready (waiting for {late.addr}: ssh port {th.port} closed" in w0
    assert "mpilaunch: 3/3 hosts ready" in w0
    seen = {int(json.load(open(tmp_path / f"rank{r}.json"))["rank"]): json.load(open(tmp_path / f"rank{r}.json"))
            for r in range(3)}
    assert [seen[r]["host"] for r in range(3)] == [h.hostname for h in th.hosts]
    assert seen[2]["vc"] == ",".join(h.addr for h in th.hosts)
    for i in (1, 2):
        assert "reports the job ended with status 0" in logs[i]


@pytest.mark.multinode
def test_failing_job_ends_every_entrypoint_with_its_status(testhosts, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    procs = [_start(testhosts, i, i, [str(script), str(tmp_path), "fail"], tmp_path) for i in range(3)]
    codes = _finish(procs, 120)
    logs = [open(tmp_path / f"entry{i}.log").read() for i in range(3)]
    assert codes == [3, 3, 3], "\n----\n".join(logs)
    assert "mpilaunch: job failed (exit status 3)" in logs[0]
    assert "root cause: rank 1" in logs[0]
    assert wait_for(lambda: not _job_processes(str(script)), 15)


@pytest.mark.multinode
@pytest.mark.parametrize("mpi", HYDRA)
def test_job_with_hydra_places_ranks_and_ends_every_entrypoint_with_its_status(testhosts, mpi, tmp_path):
    """`mpilaunch job` with Hydra's mpiexec (MPICH's or Intel MPI's venv, the same on every
    host): rank r on host r, a rank's failure ends every host's entrypoint with its status,
    nothing left."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    for how, status in (("ok", 0), ("fail", 3)):
        procs = [_start(testhosts, i, i, ["-v", str(script), str(tmp_path), how], tmp_path, mpi=mpi)
                 for i in range(3)]
        codes = _finish(procs, 120)
        logs = [open(tmp_path / f"entry{i}.log").read() for i in range(3)]
        assert codes == [status] * 3, "\n----\n".join(logs)
        assert f"mpilaunch: {os.path.dirname(mpi.mpirun)}/mpiexec.hydra -n 3 " in logs[0], logs[0]
        assert f"{REPO}/mpilaunch/rank/_boot.py" in logs[0], logs[0]
        if how == "ok":
            seen = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(3)]
            assert [s["host"] for s in seen] == [h.hostname for h in testhosts.hosts], seen
            assert "reports the job ended with status 0" in logs[1] and "reports the job ended" in logs[2]
    assert "mpilaunch: job failed (exit status 3)" in logs[0] and "root cause: rank 1" in logs[0], logs[0]
    assert wait_for(lambda: not _job_processes(str(script)), 15)


@pytest.mark.multinode
def test_usage_error_on_worker0_reaches_every_host(testhosts, tmp_path):
    """Only worker-0 validates the whole launch (--master_port 80); it says so at once and
    the waiting hosts exit 2 too."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    procs = [_start(testhosts, i, i, ["--master_port", "80", str(script), str(tmp_path)], tmp_path)
             for i in range(3)]
    codes = _finish(procs, 60)
    logs = [open(tmp_path / f"entry{i}.log").read() for i in range(3)]
    assert codes == [2, 2, 2], "\n----\n".join(logs)
    assert logs[0].splitlines()[1] == \
        ("mpilaunch: error: --master_port=80: a privileged port; "
         "give 0 (pick a free port) or a port between 1024 and 65535")
    for i in (1, 2):
        assert "reports the job ended with status 2" in logs[i]
    assert not list(tmp_path.glob("rank*.json"))             # nothing started


@pytest.mark.multinode
def test_waiting_hosts_end_when_worker0_is_lost(testhosts_healthy, tmp_path):
    th = testhosts_healthy
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    procs = [_start(th, i, i, [str(script), str(tmp_path), "sleep"], tmp_path, lost_after=4) for i in range(3)]
    try:
        assert wait_for(lambda: all((tmp_path / f"rank{r}.json").exists() for r in range(3)), 60), \
            "".join(open(tmp_path / f"entry{i}.log").read() for i in range(3))
        t0 = time.monotonic()
        th.crash(th.hosts[0])        # worker-0's host: sshd, entrypoint, mpirun, ranks
        codes = _finish(procs[1:], 30)
        took = time.monotonic() - t0
    finally:
        _finish(procs, 5)
    logs = [open(tmp_path / f"entry{i}.log").read() for i in (1, 2)]
    assert codes == [jwait.LOST_STATUS, jwait.LOST_STATUS], logs
    assert took < 4 + jwait.LIVENESS_EVERY + 6, took
    for log in logs:
        assert f"worker-0 ({th.hosts[0].addr}) has not answered for" in log
    assert wait_for(lambda: not _job_processes(str(script)), 15), _job_processes(str(script))
