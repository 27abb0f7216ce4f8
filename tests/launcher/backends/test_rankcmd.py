"""mpilaunch/backends/rankcmd.py: the rank command and each attempt's adapter flags, token by token
(written from the table of mpilaunch/rank/flags.py)."""
import pytest

from mpilaunch.backends import rankcmd
from mpilaunch.config.launchconfig import LaunchConfig

PY = "/usr/bin/python3"


def _cfg(**fields):
    base = LaunchConfig(**dict.fromkeys(LaunchConfig._fields))
    plain = dict(python=PY, exec_mode=False, log_dir=".", tail_worker_log="-1",
                 master_port=8118, scheduler=True, port_check=True, no_python=False,
                 script="/job/train.py", script_args=(), rank_extra=())
    return base._replace(**{**plain, **fields})


def test_a_plain_rank_command():
    assert rankcmd.rank_command(_cfg(), launcher_python=PY) == [
        PY, "-S", rankcmd.BOOT, "--log-dir", ".", "--tail-worker-log", "-1",
        "--master-port", "8118", "--python", PY, "--", "/job/train.py"]


def test_every_config_flag_in_order_with_the_attempt_flags_before_module():
    cfg = _cfg(exec_mode=True, log_dir="/l", worker_log_name="w_{rank}.log",
               tail_worker_log="0,3", master_addr="10.0.0.1", master_port=0,
               cluster_time_out=30, bind_core="True", visible_devices="0,1", scheduler=False,
               port_check=False, module="pkg.mod", script=None, script_args=("--lr", "1"),
               rank_extra=("--term-grace", "3"))
    assert rankcmd.rank_command(cfg, launcher_python="/other/python") == [
        PY, "-m", "mpilaunch.rank", "--exec", "--log-dir", "/l",
        "--worker-log-name", "w_{rank}.log", "--tail-worker-log", "0,3",
        "--master-addr", "10.0.0.1", "--master-port", "0", "--cluster-time-out", "30",
        "--bind-core", "True", "--visible-devices", "0,1", "--no-scheduler", "--no-port-check",
        "--python", PY, "--term-grace", "3", "--module", "--", "pkg.mod", "--lr", "1"]


def test_no_python_writes_the_executable_as_given():
    cmd = rankcmd.rank_command(_cfg(no_python=True, script="hostname"), launcher_python=PY)
    assert cmd[-3:] == ["--no-python", "--", "hostname"] and "--python" not in cmd


@pytest.mark.parametrize("args, flags", [
    ((None, 0, None, None, None), []),
    ((None, 0, None, 0.0, ""), []),           # a zero stall timeout: no watchdog
    ((1, 2, 3.0, None, None),
     ["--restart-count", "1", "--max-restarts", "2", "--term-grace", "3"]),
    ((0, 3, 0.0, 1.5, "2;exact;a:2"),          # a zero grace is still written (SIGTERM, then SIGKILL at once)
     ["--restart-count", "0", "--max-restarts", "3", "--term-grace", "0",
      "--stall-timeout", "1.5", "--expect-ranks", "2;exact;a:2"]),
    ((None, 5, None, 60.0, None), ["--stall-timeout", "60"]),   # no restarts asked
])
def test_attempt_flags(args, flags):
    assert rankcmd.attempt_flags(*args) == flags
