"""The adapter as a real process, without mpirun: a single-rank Open MPI environment is
enough for everything that does not need MPI (single node, fixed port)."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.adapter import adapter_cmd, fake_rank_env, infos, status_lines, write_worker
from helpers.procs import kill_leftovers, pid_alive as alive, wait_for

PORT = 28180  # this file uses 28180-28189


def run_adapter(tmp_path, *opts, env=None, timeout=30, script=None, args=(), no_network=False):
    script_path, out = write_worker(tmp_path)
    env = env or fake_rank_env(T_DIR=out)
    env.setdefault("T_DIR", out)
    cmd = adapter_cmd("--log-dir", str(tmp_path / "logs"), "--master-port", str(PORT), *opts,
                      script=script or script_path, args=args)
    if no_network:  # a name lookup fails at once there and no query leaves this machine
        if os.geteuid() != 0 or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
            pytest.skip("needs root and unshare -n")
        cmd = ["unshare", "-n"] + cmd
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0, out


def test_single_rank_worker_and_scheduler(tmp_path):
    p, _, out = run_adapter(tmp_path, "--tail-worker-log", "0",
                            env=fake_rank_env(T_WORKER="await:sched_0;print:hello;err:oops"))
    assert p.returncode == 0, p.stderr
    assert "[rank0] hello\n" in p.stdout and "[rank0] oops\n" in p.stdout
    got = infos(out)
    assert set(got) == {"worker_0", "sched_0"}
    assert got["sched_0"]["env"]["MS_ROLE"] == "MS_SCHED"
    assert "MS_NODE_ID" not in got["sched_0"]["env"]
    assert got["worker_0"]["argv"][0].endswith("worker.py")
    assert (tmp_path / "logs" / "worker_0.log").read_text() == "hello\noops\n"
    assert (tmp_path / "logs" / "scheduler.log").exists()
    assert status_lines(p.stderr) == []
    assert "OMPI_MCA_btl" not in got["worker_0"]["env"] or \
        got["worker_0"]["env"]["OMPI_MCA_btl"] == os.environ.get("OMPI_MCA_btl")


def test_scheduler_grace_expires(tmp_path):
    env = fake_rank_env(T_WORKER="await:sched_0;exit:0", T_SCHED="sleep:60")
    p, elapsed, out = run_adapter(tmp_path, "--scheduler-grace", "1", env=env)
    assert p.returncode == 0, p.stderr
    assert 1.0 <= elapsed < 10
    sched = infos(out)["sched_0"]["pid"]
    assert not alive(sched)
    [line] = status_lines(p.stderr)
    assert (line["role"], line["event"], line["cause"], line["signal"]) == (
        "scheduler", "grace-expired", "terminated", 15)
    assert "did not exit within 1 s" in p.stderr


def test_scheduler_exits_first_worker_still_awaited(tmp_path):
    env = fake_rank_env(T_WORKER="sleep:1.5;print:late", T_SCHED="exit:0")
    p, elapsed, _ = run_adapter(tmp_path, env=env)
    assert p.returncode == 0 and elapsed >= 1.5
    assert "[rank0] late" in p.stdout


def test_scheduler_failure_ends_the_worker(tmp_path):
    env = fake_rank_env(T_WORKER="sleep:60", T_SCHED="waitfile:1;err:sched broke;exit:5")
    p, elapsed, out = run_adapter(tmp_path, env=env)
    assert p.returncode == 5 and elapsed < 10
    assert not alive(infos(out)["worker_0"]["pid"])
    lines = {l["role"]: l for l in status_lines(p.stderr)}
    assert (lines["scheduler"]["cause"], lines["scheduler"]["code"]) == ("self", 5)
    assert lines["scheduler"]["tail"] == ["sched broke"]
    assert lines["scheduler"]["log"] == str(tmp_path / "logs" / "scheduler.log")
    assert (lines["worker"]["cause"], lines["worker"]["signal"]) == ("terminated", 15)


def test_worker_exit_code_and_secret_masking(tmp_path):
    env = fake_rank_env(T_WORKER="print:key=abcd-SECRET-1234;exit:3", MY_API_TOKEN="abcd-SECRET-1234")
    p, _, _ = run_adapter(tmp_path, "--no-scheduler", env=env)
    assert p.returncode == 3
    [line] = status_lines(p.stderr)
    assert (line["role"], line["code"], line["signal"], line["cause"], line["rank"]) == (
        "worker", 3, None, "self", 0)
    assert line["tail"] == ["key=****"]


def test_status_tail_masks_multiline_secret_and_secret_past_500_chars(tmp_path):
    # the status line's tail is masked before each line is cut to 500 characters: a secret
    # at the end of a long line must not leave its first characters behind, and a multi-line
    # secret value printed by the worker is masked line by line
    secret = "abcd-SECRET-1234-tail"
    long_line = "x" * 490 + secret
    env = fake_rank_env(T_WORKER=f"printenv:MA_API_KEY;print:{long_line};exit:3",
                        MA_API_KEY="multi-line-secret-1\nmulti-line-secret-2", OBS_TOKEN=secret)
    p, _, _ = run_adapter(tmp_path, "--no-scheduler", env=env)
    assert p.returncode == 3, p.stderr
    [line] = status_lines(p.stderr)
    assert line["tail"] == ["****", "****", "x" * 490 + "****"]
    assert "multi-line" not in p.stderr and "abcd" not in p.stderr


def test_worker_killed_by_signal(tmp_path):
    p, _, _ = run_adapter(tmp_path, "--no-scheduler", env=fake_rank_env(T_WORKER="kill:9"))
    assert p.returncode == 137
    [line] = status_lines(p.stderr)
    assert (line["code"], line["signal"], line["cause"]) == (137, 9, "self")


def test_worker_sigtermed_by_someone_else_is_its_own_failure(tmp_path):
    p, elapsed, _ = run_adapter(tmp_path, "--no-scheduler", env=fake_rank_env(T_WORKER="kill:15"))
    assert p.returncode == 143 and elapsed < 5
    [line] = status_lines(p.stderr)
    assert (line["signal"], line["cause"]) == (15, "self")


def test_start_failure_is_reported(tmp_path):
    bad = tmp_path / "notexec"
    bad.write_bytes(b"\x7fELF-not-really")
    bad.chmod(0o755)
    p, _, _ = run_adapter(tmp_path, "--no-scheduler", "--no-python", script=str(bad))
    assert p.returncode == 126
    [line] = status_lines(p.stderr)
    assert (line["event"], line["cause"], line["code"]) == ("start-failed", "self", 126)
    assert "cannot start" in line["message"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_adapter_tears_down(tmp_path, sig):
    script, out = write_worker(tmp_path)
    env = fake_rank_env(T_DIR=out, T_WORKER="child;sleep:60", T_SCHED="sleep:60")
    cmd = adapter_cmd("--log-dir", str(tmp_path / "logs"), "--master-port", str(PORT + 1),
                      script=script)
    a = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(infos(out)) == 2 and
                        os.path.exists(os.path.join(out, "grandchild_worker_0")))
        gc = int(open(os.path.join(out, "grandchild_worker_0")).read())
        pids = [i["pid"] for i in infos(out).values()] + [gc]
        t0 = time.monotonic()
        a.send_signal(sig)
        _, err = a.communicate(timeout=15)
        assert time.monotonic() - t0 < 5
        assert a.returncode == 128 + sig
        assert not any(alive(pid) for pid in pids)
        lines = status_lines(err)
        assert sorted(l["role"] for l in lines) == ["scheduler", "worker"]
        assert all(l["cause"] == "terminated" for l in lines)
    finally:
        a.kill()
        a.wait()


def test_adapter_sigkilled_children_die(tmp_path):
    script, out = write_worker(tmp_path)
    env = fake_rank_env(T_DIR=out, T_WORKER="sleep:60", T_SCHED="sleep:60")
    cmd = adapter_cmd("--log-dir", str(tmp_path / "logs"), "--master-port", str(PORT + 2),
                      script=script)
    a = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(infos(out)) == 2)
        pids = [i["pid"] for i in infos(out).values()]
        a.kill()
        a.wait()
        assert wait_for(lambda: not any(alive(pid) for pid in pids), timeout=5)
    finally:
        a.kill()
        a.wait()


def test_bind_core_auto_and_dict(tmp_path):
    cpus = sorted(psutil.Process().cpu_affinity())
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    p, _, out = run_adapter(tmp_path, "--bind-core", "True",
                            env=fake_rank_env(T_WORKER="await:sched_0"))
    assert p.returncode == 0, p.stderr
    got = infos(out)
    assert got["sched_0"]["affinity"] == cpus[:len(cpus) // 2]
    assert got["worker_0"]["affinity"] == cpus[len(cpus) // 2:]
    spec = '{"scheduler":["%d"],"device0":["%d"]}' % (cpus[1], cpus[0])
    p, _, out = run_adapter(tmp_path, "--bind-core", spec,
                            env=fake_rank_env(T_WORKER="await:sched_0"))
    assert p.returncode == 0, p.stderr
    got = infos(out)
    assert got["sched_0"]["affinity"] == [cpus[1]] and got["worker_0"]["affinity"] == [cpus[0]]


def test_log_name_placeholders_and_log_dir_created(tmp_path):
    p, _, out = run_adapter(tmp_path, "--no-scheduler", "--worker-log-name",
                            "w_{hostname}_{ip}_{rank}.txt", "--tail-worker-log", "none",
                            env=fake_rank_env(T_WORKER="print:x"))
    assert p.returncode == 0 and p.stdout == ""
    import socket
    names = os.listdir(tmp_path / "logs")
    assert len(names) == 1 and names[0].startswith(f"w_{socket.gethostname()}_")
    assert names[0].endswith("_0.txt") and (tmp_path / "logs" / names[0]).read_text() == "x\n"


def test_exec_mode_replaces_the_adapter(tmp_path):
    env = fake_rank_env(T_WORKER="exit:7")
    p, _, out = run_adapter(tmp_path, "--exec", env=env)
    assert p.returncode == 7
    got = infos(out)
    assert set(got) == {"worker_0"}                   # no scheduler in --exec mode
    assert got["worker_0"]["env"]["MS_ROLE"] == "MS_WORKER"
    assert status_lines(p.stderr) == []               # nobody left to report


@pytest.mark.parametrize("opts, env_extra, needle", [
    (["--master-port", "70000"], {}, "--master-port='70000': out of range"),
    (["--bogus"], {}, "unrecognized arguments: --bogus"),
    (["--bind-core", "{bad"], {}, "--bind-core"),
    (["--tail-worker-log", "5"], {}, "--tail-worker-log: rank 5 does not exist"),
    (["--worker-log-name", "{nodename}.log"], {}, "--worker-log-name"),
    (["--visible-devices", ""], {}, "--visible-devices='': is empty"),
    ([], {"OMPI_COMM_WORLD_LOCAL_SIZE": "x"}, "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ([], {"CUDA_VISIBLE_DEVICES": "0", "OMPI_COMM_WORLD_SIZE": "2",
          "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "CUDA_VISIBLE_DEVICES"),
    (["--exec", "--master-port", "0"], {}, "--exec cannot use --master-port 0"),
    (["--master-addr", "no-such-host.invalid"], {}, "--master-addr"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, opts, env_extra, needle):
    env = fake_rank_env()
    env.update(env_extra)
    p, _, out = run_adapter(tmp_path, *opts, env=env, no_network=True)
    assert p.returncode == 2
    human = [l for l in p.stderr.splitlines() if not l.startswith("@@mpilaunch ")]
    assert len(human) == 1 and human[0].startswith("mpilaunch.rank: error: "), p.stderr
    assert needle in human[0]
    assert "Traceback" not in p.stderr
    [line] = status_lines(p.stderr)
    assert (line["role"], line["code"], line["cause"]) == ("adapter", 2, "self")
    assert infos(out) == {}                           # nothing started


def test_missing_script_is_a_usage_error(tmp_path):
    p, _, _ = run_adapter(tmp_path, script=str(tmp_path / "nope.py"))
    assert p.returncode == 2 and "script" in p.stderr and "not found" in p.stderr


def test_port_in_use_single_node_without_mpi(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", PORT + 3))
    s.listen()
    try:
        p, _, out = run_adapter(tmp_path, "--master-port", str(PORT + 3))
    finally:
        s.close()
    assert p.returncode == 2
    assert f"--master-port {PORT + 3} is already in use on host" in p.stderr
    assert infos(out) == {}


def test_startup_does_not_import_mpi4py(tmp_path):
    code = ("import sys, runpy; sys.argv=['x','--help']\n"
            "try:\n    runpy.run_module('mpilaunch.rank', run_name='__main__')\n"
            "except SystemExit: pass\n"
            "print('mpi4py' in sys.modules, 'psutil' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert p.stdout.strip().splitlines()[-1] == "False False"


def test_unwritable_log_dir_is_a_usage_error(tmp_path):
    logs_file = tmp_path / "logs"
    logs_file.write_text("a file, not a directory")
    p, _, out = run_adapter(tmp_path)
    assert p.returncode == 2 and "--log-dir" in p.stderr and infos(out) == {}


def test_missing_mpi4py_when_mpi_is_needed_is_a_usage_error(tmp_path):
    # a python path entry that shadows mpi4py with an unimportable module
    shadow = tmp_path / "shadow" / "mpi4py"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no mpi4py here')\n")
    env = fake_rank_env()
    env["PYTHONPATH"] = f"{tmp_path / 'shadow'}{os.pathsep}{REPO}"
    p, _, out = run_adapter(tmp_path, "--master-port", "0", env=env)
    assert p.returncode == 2, p.stderr
    assert "mpi4py is needed because --master-port 0 was asked" in p.stderr
    assert "Traceback" not in p.stderr and infos(out) == {}
