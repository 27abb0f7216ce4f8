"""Exact mpirun argv for Open MPI 4.x and 5.x: defaults, overrides, single and multi-node."""
import pytest

from mpilaunch.config import launchconfig
from mpilaunch.backends import rankcmd
from mpilaunch.backends import openmpi
from mpilaunch.config.options import parser as run_parser
from mpilaunch.errors import UsageError
from mpilaunch.config.mpi import OMPI4, OMPI5, MpiInfo, parse_version_output

M4 = MpiInfo("/usr/bin/mpirun", (4, 1, 4), OMPI4)
M5 = MpiInfo("/venv/bin/mpirun", (5, 0, 11), OMPI5)
PY = "/venv/bin/python3"


def make(argv, env, mpi, tmp_path, euid=1000):
    script = tmp_path / "train.py"
    script.write_text("import mindspore  # a MindSpore job: rank 0 runs the scheduler\n")
    args = run_parser().parse_args(["--python", PY] + argv + [str(script), "--lr", "0.1"])
    cfg = launchconfig.build(args, env)
    return openmpi.make_plan(cfg, env, mpi, "/run", euid), str(script)


def hostfile_text(p):
    return dict(openmpi.OpenMpi(p.mpi).files(p))[p.hostfile_path]


def tune_text(p):
    return dict(openmpi.OpenMpi(p.mpi).files(p))[p.tune_path]


def rank_cmd(script, extra=()):
    return [PY, "-m", "mpilaunch.rank", "--log-dir", ".", "--tail-worker-log", "-1",
            "--master-port", "8118", *extra, "--python", PY,
            "--", script, "--lr", "0.1"]


DEFAULT_X = ["-x", "HOROVOD_MPI_THREADS_DISABLE=1", "-x", "NCCL_DEBUG=INFO",
             "-x", "NCCL_SOCKET_IFNAME=ib0,bond0,eth0", "-x", "NCCL_SOCKET_FAMILY=AF_INET",
             "-x", "NCCL_IB_DISABLE=0"]


def test_ompi5_defaults_single_node(tmp_path):
    p, script = make(["-np", "4"], {"LD_LIBRARY_PATH": "/lib"}, M5, tmp_path)
    assert openmpi.argv(p) == [
        "/venv/bin/mpirun", "-np", "4", "--hostfile", "/run/hostfile", "--tune", "/run/tune.env",
        "--bind-to", "none", "--map-by", "slot", "-x", "LD_LIBRARY_PATH", *DEFAULT_X,
        "--mca", "pml", "ob1", "--mca", "btl", "^openib", "--prtemca", "plm_ssh_no_tree_spawn", "true",
        *rank_cmd(script),
    ]
    assert hostfile_text(p) == "localhost slots=4\n"


def test_ompi4_defaults_multi_node_with_ssh_port_as_root(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a slots=2\nnode-b slots=2\n")
    env = {"OPENMPI_HOST_FILE_PATH": str(hostfile), "SSHD_PORT": "2222", "MA_JOB": "7"}
    p, script = make([], env, M4, tmp_path, euid=0)
    assert openmpi.argv(p) == [
        "/usr/bin/mpirun", "--noprefix", "-np", "4", "--hostfile", "/run/hostfile",
        "--mca", "plm_rsh_args", "-p 2222", "--tune", "/run/tune.env",
        "--bind-to", "none", "--map-by", "slot", *DEFAULT_X,
        "--mca", "pml", "ob1", "--mca", "btl", "^openib", "--mca", "plm_rsh_no_tree_spawn", "true",
        "--mca", "oob_tcp_keepalive_time", "10", "--mca", "oob_tcp_keepalive_intvl", "3",
        "--mca", "oob_tcp_keepalive_probes", "3",
        "--allow-run-as-root", *rank_cmd(script),
    ]
    assert tune_text(p) == "-x MA_JOB=7\n"
    assert p.dropped_x == ("LD_LIBRARY_PATH",)


def test_ompi5_ssh_port_goes_to_prrte(tmp_path):
    p, _ = make(["-H", "a:1,b:1", "--ssh-port", "2222", "--ssh-args", "-F /cfg"], {}, M5, tmp_path)
    argv = openmpi.argv(p)
    assert argv[5:8] == ["--prtemca", "plm_ssh_args", "-p 2222 -F /cfg"]
    assert "plm_rsh_args" not in argv


def test_overrides_flag_beats_variable_beats_default(tmp_path):
    env = {"OPENMPI_NP": "3", "OPENMPI_BIND_ARGS": "-bind-to core -map-by ppr:1:node",
           "OPENMPI_X_ARGS": "-x FOO=1", "OPENMPI_MCA_ARGS": "-mca btl tcp,self",
           "OPENMPI_EXTRA_ARGS": "-report-bindings --tag-output", "SSHD_PORT": "22"}
    p, script = make(["-np", "2", "--mca-args", "-mca btl self", "--oversubscribe", "-H", "a:1"],
                     env, M5, tmp_path)
    assert openmpi.argv(p) == [
        "/venv/bin/mpirun", "-np", "2", "--hostfile", "/run/hostfile",
        "--prtemca", "plm_ssh_args", "-p 22", "--tune", "/run/tune.env",
        "--bind-to", "core", "--map-by", "ppr:1:node", "-x", "FOO=1", "--mca", "btl", "self",
        "--report-bindings", "--tag-output",
        "--prtemca", "oob_tcp_keepalive_time", "10", "--prtemca", "oob_tcp_keepalive_intvl", "3",
        "--prtemca", "oob_tcp_keepalive_probes", "3", "--oversubscribe", *rank_cmd(script),
    ]


def test_routed_variables_travel_as_names_only(tmp_path):
    env = {"MA_SPACE": "a b", "AWS_SECRET_ACCESS_KEY": "hunter2", "MA_OK": "1"}
    p, _ = make(["-np", "1"], env, M5, tmp_path)
    argv = openmpi.argv(p)
    i = argv.index("AWS_SECRET_ACCESS_KEY")
    assert argv[i - 1] == "-x" and argv[argv.index("MA_SPACE") - 1] == "-x"
    assert not any("hunter2" in tok or "a b" == tok for tok in argv)
    assert tune_text(p) == "-x MA_OK=1\n"


def test_rank_options_passed_through(tmp_path):
    p, script = make(["-np", "2", "--log_dir", "/logs", "--master_port", "0", "--master_addr", "10.0.0.1",
                      "--tail_worker_log", "0,1", "--no-scheduler", "--bind_core", "True",
                      "--worker_log_name", "w_{hostname}_{rank}.log", "--cluster_time_out", "30",
                      "--rdzv-id", "job-1"],
                     {}, M5, tmp_path)
    assert list(p.rank_command) == [
        PY, "-m", "mpilaunch.rank", "--log-dir", "/logs", "--worker-log-name", "w_{hostname}_{rank}.log",
        "--tail-worker-log", "0,1", "--master-addr", "10.0.0.1", "--master-port", "0",
        "--cluster-time-out", "30", "--bind-core", "True", "--run-id", "job-1", "--no-scheduler",
        "--python", PY,
        "--", script, "--lr", "0.1",
    ]


@pytest.mark.parametrize("text, expected", [
    ("mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n", ((5, 0, 11), OMPI5)),
    ("mpirun (Open MPI) 4.1.4\n", ((4, 1, 4), OMPI4)),
])
def test_version_detection(text, expected):
    assert parse_version_output(text) == expected


@pytest.mark.parametrize("text, message", [
    ("HYDRA build details:\n    Version: 3.2.1\n", "mpirun: MPICH 3.2.1 is too old"),  # newer: tests/launcher/backends/test_hydra.py
    ("something else\n", "mpirun: not a recognised mpirun ('something else')"),
])
def test_unsupported_mpi(text, message):
    with pytest.raises(UsageError) as err:
        parse_version_output(text)
    assert str(err.value).startswith(message)


def test_own_interpreter_starts_the_adapter_without_site(tmp_path):
    import sys
    script = tmp_path / "train.py"
    script.write_text("import mindspore  # a MindSpore job: rank 0 runs the scheduler\n")
    args = run_parser().parse_args(["--python", sys.executable, "-np", "1", str(script)])
    cfg = launchconfig.build(args, {})
    cmd = rankcmd.rank_command(cfg)
    assert cmd[:3] == [sys.executable, "-S", rankcmd.BOOT]
    assert rankcmd.BOOT.endswith("mpilaunch/rank/_boot.py")
    assert rankcmd.rank_command(cfg, launcher_python="/other/python")[:3] == [sys.executable, "-m", "mpilaunch.rank"]


def test_more_local_ranks_than_cpus_yield_when_idle_unless_the_user_said(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")

    def args(cfg_argv, env, cpus):
        ns = run_parser().parse_args(["--python", PY] + cfg_argv + [str(script)])
        return openmpi.argv(openmpi.make_plan(launchconfig.build(ns, env), env, M5, "/run", 1000, cpus=cpus))

    assert "mpi_yield_when_idle" not in args(["-np", "2"], {}, 2)
    argv = args(["-np", "4"], {}, 2)
    assert argv[argv.index("mpi_yield_when_idle") - 1:argv.index("mpi_yield_when_idle") + 2] == \
        ["--mca", "mpi_yield_when_idle", "1"]
    mine = args(["-np", "4", "--mca-args", "-mca mpi_yield_when_idle 0"], {}, 2)
    assert mine[mine.index("mpi_yield_when_idle") + 1] == "0" and mine.count("mpi_yield_when_idle") == 1
    assert "mpi_yield_when_idle" not in args(["-np", "4"], {"OMPI_MCA_mpi_yield_when_idle": "0"}, 2)
    assert "mpi_yield_when_idle" not in args(["-H", "a:2,b:2", "-np", "4"], {}, 2)   # not this host's CPUs


def test_keepalive_only_for_remote_hosts_and_not_twice(tmp_path):
    local, _ = make(["-np", "2"], {}, M5, tmp_path)
    assert "oob_tcp_keepalive_time" not in openmpi.argv(local)
    mine, _ = make(["-H", "a:1,b:1", "--mca-args", "-mca oob_tcp_keepalive_time 60"], {}, M4, tmp_path)
    argv = openmpi.argv(mine)
    assert argv.count("oob_tcp_keepalive_time") == 1
    assert argv[argv.index("oob_tcp_keepalive_time") + 1] == "60"
    assert "oob_tcp_keepalive_probes" in argv
    restarts, _ = make(["-H", "a:1,b:1", "--max_restarts", "1"], {}, M5, tmp_path)
    argv = openmpi.argv(restarts)
    assert argv[argv.index("oob_tcp_keepalive_time") + 1] == "3"   # a restart, not the job


def _cfg(tmp_path, source, *argv, env=None, name="train.py"):
    script = tmp_path / name
    script.write_text(source)
    args = run_parser().parse_args(["--python", PY, *argv, str(script)])
    return launchconfig.build(args, env or {})


@pytest.mark.parametrize("source, extra, env, on, why", [
    ("import mindspore as ms\n", [], {}, True, "train.py imports mindspore"),
    ("import os, mindspore.nn as nn\n", [], {}, True, "imports mindspore"),
    ("from src.net import Net\n", [], {}, True, "net.py imports mindspore"),   # a local module
    ("import torch\n", [], {}, False, "does not import mindspore"),
    ("import torch\n", ["--scheduler"], {}, True, "--scheduler"),
    ("import mindspore\n", ["--no-scheduler"], {}, False, "--no-scheduler"),
    ("print(1)\n", [], {"MS_WORKER_NUM": "2"}, True, "MS_WORKER_NUM is set"),
    ("import mindspore\n", ["--exec"], {}, False, "--exec"),
])
def test_scheduler_only_for_mindspore_jobs(tmp_path, source, extra, env, on, why):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "__init__.py").write_text("")
    (tmp_path / "src" / "net.py").write_text("from mindspore import nn\n")
    cfg = _cfg(tmp_path, source, "-np", "2", *extra, env=env)
    assert cfg.scheduler is on and why in cfg.scheduler_why
    assert ("--no-scheduler" in rankcmd.rank_command(cfg)) is (not on)


def test_mpi_program_without_exec_refused_where_the_adapter_uses_mpi(tmp_path):
    src = "from mpi4py import MPI\n"
    assert not _cfg(tmp_path, src, "-np", "2").scheduler    # one host, fixed port: runs
    for argv in (["-H", "a:1,b:1"], ["-np", "2", "--master_port", "0"]):
        with pytest.raises(UsageError, match="MPI program .*mpi4py.*--exec"):
            _cfg(tmp_path, src, *argv)
    _cfg(tmp_path, src, "--exec", "-H", "a:1,b:1", "--master_addr", "a")


def test_module_and_stdin_in_the_argv(tmp_path):
    args = run_parser().parse_args(["--python", PY, "-np", "2", "--stdin", "all", "-m",
                                    "pkg.mod", "--lr", "0.1"])
    cfg = launchconfig.build(args, {})
    p = openmpi.make_plan(cfg, {}, M5, "/run", 1000)
    argv = openmpi.argv(p)
    assert argv[argv.index("--stdin") + 1] == "all"
    assert argv[-5:] == ["--module", "--", "pkg.mod", "--lr", "0.1"]
    args = run_parser().parse_args(["--python", PY, "-np", "2", str(tmp_path / "x.py")])
    (tmp_path / "x.py").write_text("")
    assert "--stdin" not in openmpi.argv(openmpi.make_plan(launchconfig.build(args, {}), {}, M4, "/run", 1000))
    with pytest.raises(UsageError, match="--stdin"):
        launchconfig.build(run_parser().parse_args(["--stdin", "some", "-np", "1", "-m", "x"]), {})


def test_exec_port_is_picked_or_passed_unchecked(tmp_path):
    src = "from mpi4py import MPI\n"
    cfg = _cfg(tmp_path, src, "--exec", "-np", "2")
    assert cfg.master_port != 8118 and not cfg.port_check
    assert "--no-port-check" in rankcmd.rank_command(cfg)
    cfg = _cfg(tmp_path, src, "--exec", "-np", "2", "--master_port", "0")
    assert cfg.master_port != 0 and not cfg.port_check
    cfg = _cfg(tmp_path, src, "--exec", "-np", "2", "--master_port", "29500")
    assert (cfg.master_port, cfg.port_check) == (29500, True)
    cfg = _cfg(tmp_path, src, "--exec", "-H", "a:1,b:1", "--master_addr", "a")
    assert (cfg.master_port, cfg.port_check) == (8118, False)
    with pytest.raises(UsageError, match="give a port"):
        _cfg(tmp_path, src, "--exec", "-H", "a:1,b:1", "--master_addr", "a", "--master_port", "0")
