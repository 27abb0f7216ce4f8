"""Hydra's mpiexec (MPICH, Intel MPI): detection and the exact argv, token by token (pure)."""
import pytest

from mpilaunch.config import launchconfig, mpi
from mpilaunch.backends import hydra
from mpilaunch.errors import UsageError
from mpilaunch.config.mpi import IMPI, MPICH, MpiInfo, parse_version_output
from mpilaunch.config.options import parser as run_parser
from mpilaunch.ssh import keepalive_options

KA = " ".join(keepalive_options())   # a proxy's ssh ends when its host's link dies

MC = MpiInfo("/v/bin/mpiexec.hydra", (5, 0, 2), MPICH)
IM = MpiInfo("/w/bin/mpiexec.hydra", (2021, 18, 1), IMPI)
PY = "/venv/bin/python3"
DEFAULT_GENV = ["-genv", "HOROVOD_MPI_THREADS_DISABLE", "1", "-genv", "NCCL_DEBUG", "INFO",
                "-genv", "NCCL_SOCKET_IFNAME", "ib0,bond0,eth0", "-genv", "NCCL_SOCKET_FAMILY", "AF_INET",
                "-genv", "NCCL_IB_DISABLE", "0"]


def make(argv, env, info, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    args = run_parser().parse_args(["--python", PY] + argv + [str(script)])
    return hydra.Hydra(info).plan(launchconfig.build(args, env), env, "/run", 0)


def hydra_argv(p):
    return hydra.Hydra(p.mpi).argv(p)


def rank_tail(p):
    return list(p.rank_command)


@pytest.mark.parametrize("text, expected", [
    ("HYDRA build details:\n    Version:                                 5.0.2\n    Release Date: x\n",
     ((5, 0, 2), MPICH)),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.18.1 Build 20260626 (id: b44796a)\n"
     "Copyright 2003-2026, Intel Corporation.\n", ((2021, 18, 1), IMPI)),
])
def test_detects_mpich_and_intel_mpi(text, expected):
    assert parse_version_output(text) == expected


def test_intel_mpirun_wrapper_is_replaced_by_mpiexec_hydra_beside_it(tmp_path):
    for name in ("mpirun", "mpiexec.hydra"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    assert mpi.hydra_beside(str(tmp_path / "mpirun")) == str(tmp_path / "mpiexec.hydra")
    assert mpi.hydra_beside("/usr/bin/mpirun") is None   # Open MPI: no mpiexec.hydra beside


def test_mpich_defaults_single_node(tmp_path):
    env = {"LD_LIBRARY_PATH": "/lib", "MA_JOB": "a b", "PATH": "/bin"}
    p = make(["-np", "4"], env, MC, tmp_path)
    assert hydra_argv(p) == ["/v/bin/mpiexec.hydra", "-n", "4", "-f", "/run/hostfile",
                            "-bind-to", "none", *DEFAULT_GENV,
                            "-genvlist", "MA_JOB,PATH,LD_LIBRARY_PATH", *rank_tail(p)]
    assert hydra.Hydra(MC).files(p) == [("/run/hostfile", "localhost:4\n")]   # no tune file
    assert p.extra_env == {}


def test_intel_multi_node_ssh_port_and_no_pinning(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a slots=2\nnode-b:2\n")
    env = {"OPENMPI_HOST_FILE_PATH": str(hostfile), "SSHD_PORT": "2222", "MA_JOB": "7"}
    p = make([], env, IM, tmp_path)
    # -machinefile: Intel MPI ignores host:N counts under -f (2 ranks on the first of a:1 b:1)
    assert hydra_argv(p) == ["/w/bin/mpiexec.hydra", "-n", "4", "-machinefile", "/run/hostfile",
                            "-bootstrap-exec-args", "-p 2222 " + KA, "-genv", "I_MPI_PIN", "0", *DEFAULT_GENV,
                            "-genvlist", "MA_JOB", *rank_tail(p)]
    assert hydra.Hydra(IM).files(p) == [("/run/hostfile", "node-a:2\nnode-b:2\n")]
    assert p.dropped_x == ("LD_LIBRARY_PATH",)


def test_mpich_ssh_port_travels_in_mpiexecs_environment(tmp_path):
    p = make(["--ssh-port", "2222", "--ssh-args", "-F /cfg"], {}, MC, tmp_path)
    assert p.extra_env == {"HYDRA_LAUNCHER_EXTRA_ARGS": "-p 2222 -F /cfg"}   # one host: no keepalive
    assert "-p 2222 -F /cfg" not in hydra_argv(p)


def test_modelarts_plm_rsh_args_becomes_the_ssh_port(tmp_path):
    env = {"OPENMPI_MCA_ARGS": "-mca plm_rsh_args '-p 2200' -mca btl_tcp_if_include eth0"}
    p = make([], env, IM, tmp_path)
    assert p.ssh == ("-bootstrap-exec-args", "-p 2200")
    assert p.args[-2:] == ("-iface", "eth0")


def test_secrets_never_in_the_argv(tmp_path):
    env = {"OPENMPI_X_ARGS": "-x MA_SECRET_KEY=s3cr3t -x OBS_AK=ak-value",
           "OPENMPI_EXTRA_ARGS": "-genv MY_TOKEN tok-value -genv PLAIN v"}
    p = make(["--env-prefixes", "MA_"], {**env, "MA_PASSWORD": "pw"}, MC, tmp_path)
    cmd = hydra_argv(p)
    for value in ("s3cr3t", "ak-value", "tok-value", "pw"):
        assert not any(value in tok for tok in cmd)
    assert p.extra_env == {"MA_SECRET_KEY": "s3cr3t", "OBS_AK": "ak-value", "MY_TOKEN": "tok-value"}
    genvlist = cmd[cmd.index("-genvlist") + 1].split(",")
    assert set(genvlist) >= {"MA_SECRET_KEY", "OBS_AK", "MY_TOKEN", "MA_PASSWORD"}
    assert ["-genv", "PLAIN", "v"] == cmd[cmd.index("PLAIN") - 1:cmd.index("PLAIN") + 2]


def test_no_broadcast_name_keeps_hydras_envall_away(tmp_path):
    p = make(["--env-prefixes", "NOPE_", "--x-args="], {}, MC, tmp_path)
    assert "-genvnone" in hydra_argv(p) and "-genvlist" not in hydra_argv(p)


@pytest.mark.parametrize("argv, message", [
    (["--mca-args=--mca pml ucx"],
     "--mca-args: --mca pml ucx is an Open MPI parameter; MPICH (Hydra) has none: drop it, or give "
     "Hydra's own option in --extra-args/OPENMPI_EXTRA_ARGS (e.g. -genv NAME VALUE, -iface IF, -ppn N)"),
    (["--extra-args=--report-bindings"],
     "--extra-args: option --report-bindings has no MPICH (Hydra) equivalent; drop it, or give "
     "Hydra's own option in --extra-args/OPENMPI_EXTRA_ARGS (e.g. -genv NAME VALUE, -iface IF, -ppn N)"),
    (["--extra-args=-frobnicate"],
     "--extra-args: option --frobnicate is not known for MPICH (Hydra's mpiexec); give Hydra's own "
     "option in --extra-args/OPENMPI_EXTRA_ARGS (e.g. -genv NAME VALUE, -iface IF, -ppn N)"),
])
def test_open_mpi_only_options_are_one_clear_line(argv, message, tmp_path):
    with pytest.raises(UsageError) as err:
        make(argv, {}, MC, tmp_path)
    assert str(err.value) == message


def test_intel_binding_other_than_none_names_its_own_variable(tmp_path):
    with pytest.raises(UsageError, match="I_MPI_PIN_DOMAIN"):
        make(["--bind-args=--bind-to core"], {}, IM, tmp_path)
    p = make(["--bind-args=--bind-to core --map-by node"], {}, MC, tmp_path)
    assert hydra_argv(p)[5:8] == ["-bind-to", "core", "-rr"]


def test_hydra_options_pass_through_and_ssh_twice_is_refused(tmp_path):
    p = make(["--extra-args=-ppn 2 -iface eth0 -prepend-rank"], {}, MC, tmp_path)
    assert p.args[-5:] == ("-ppn", "2", "-iface", "eth0", "-prepend-rank")
    with pytest.raises(UsageError, match="given twice"):
        make(["--ssh-port", "22", "--mca-args=--mca plm_rsh_args '-p 2'"], {}, MC, tmp_path)


def test_hostfile_in_hydras_form():
    from mpilaunch.config.hostfile import Host
    assert hydra.render_hostfile((Host("a", 2), Host("10.0.0.2", 1))) == "a:2\n10.0.0.2:1\n"


def test_intel_gets_the_interface_routing_to_the_remote_hosts(tmp_path, monkeypatch):
    """Intel MPI's remote bootstrap proxies call back by this host's name: -iface keeps them off
    name resolution (measured on the namespace test hosts); MPICH needs nothing."""
    from mpilaunch import net, netif
    monkeypatch.setattr(net, "route_source", lambda dest: "10.9.0.5")
    monkeypatch.setattr(netif, "addresses", lambda: [("lo", 2, "127.0.0.1"), ("ens7", 2, "10.9.0.5")])
    argv = ["--hostfile", str(tmp_path / "hosts")]
    (tmp_path / "hosts").write_text("10.9.0.6 slots=1\n10.9.0.7 slots=1\n")
    assert "-iface ens7" in " ".join(hydra_argv(make(argv, {}, IM, tmp_path)))
    assert "-iface" not in hydra_argv(make(argv, {}, MC, tmp_path))
    given = hydra_argv(make(argv + ["--extra-args", "-iface ib0"], {}, IM, tmp_path))
    assert given.count("-iface") == 1 and "ib0" in given
    assert "-iface" not in hydra_argv(make(argv, {"I_MPI_HYDRA_IFACE": "ib0"}, IM, tmp_path))
    assert "-iface" not in hydra_argv(make(["-np", "2"], {}, IM, tmp_path))   # one host


def test_stdin_in_hydras_words(tmp_path):
    for value, tokens in (("all", ["-s", "all"]), ("2", ["-s", "2"])):
        argv = hydra_argv(make(["-np", "4", "--stdin", value], {}, IM, tmp_path))
        assert argv[argv.index("-s"):argv.index("-s") + 2] == tokens
    for value in ("0", "none"):
        assert "-s" not in hydra_argv(make(["-np", "4", "--stdin", value], {}, IM, tmp_path))
        assert "-s" not in hydra_argv(make(["-np", "4", "--stdin", value], {}, MC, tmp_path))
    for value in ("all", "1"):
        with pytest.raises(UsageError, match="MPICH's mpiexec forwards stdin to rank 0 only"):
            make(["-np", "4", "--stdin", value], {}, MC, tmp_path)


def test_hydras_bad_termination_block_names_rank_host_and_pid():
    from mpilaunch.output.summary import Collector
    bar = "=" * 20
    intel = (f"{bar}\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 1 PID 4242 RUNNING AT "
             f"node-b\n=   KILLED BY SIGNAL: 9 (Killed)\n{bar}\n")
    mpich = (f"{bar}\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 4691 RUNNING AT 10.0.0.2\n"
             f"=   EXIT CODE: 9\n=   CLEANING UP REMAINING PROCESSES\n{bar}\n")
    victim = intel.replace("RANK 1 PID 4242", "RANK 0 PID 11").replace("SIGNAL: 9 (Killed)", "SIGNAL: 15 (Terminated)")
    c = Collector(hydra.Hydra(MC))
    c.feed_text(victim + intel + mpich)
    got = [(e.rank, e.host, e.signal, e.code, e.message) for e in c.notices]
    assert got == [(1, "node-b", 9, 137, "pid 4242 (Hydra's report)"), (None, "10.0.0.2", None, 9, "pid 4691 (Hydra's report)")]
    assert c.root_cause().rank == 1


def test_lost_host_found_by_the_launcher_is_the_summarys_root_cause(tmp_path):
    from mpilaunch.backends import hydra_report
    from mpilaunch.output.summary import Collector, render_summary

    assert hydra_report.proxy_lost("[mpiexec@h1] control_cb (mpiexec/pmiserv_cb.c:291): assert (!closed) failed")
    assert not hydra_report.proxy_lost("step 3 loss 0.25")
    c = Collector(hydra.Hydra(MC))
    c.unreachable = ["node-c"]
    text = render_summary(c, 255, program="mpiexec")
    assert "root cause: host node-c lost: its ssh port no longer answers" in text, text
    p = make(["-H", "node-a:1,node-b:1", "--ssh-port", "2222", "--ssh-args", "-F /cfg"], {}, MC, tmp_path)
    assert hydra_report._ssh_args(p) == ["-p", "2222", "-F", "/cfg", *keepalive_options()]


def test_mpiexecs_environment_ends_with_a_variable_no_rank_needs(tmp_path):
    """MPICH's mpiexec drops the last entry of its environment for remote ranks (hydra.Hydra.env):
    the launcher puts the backend's additions last, in their order, so ENV_END takes that place
    and the control channel's key (or a user's listed variable) never does."""
    from mpilaunch.supervise.starter import starter_environment

    p = make(["--ssh-port", "2222"], {}, MC, tmp_path)
    additions = hydra.Hydra(MC).env(p)
    assert list(additions) == ["HYDRA_LAUNCHER_EXTRA_ARGS", hydra.ENV_END]
    base = {"PATH": "/bin", hydra.ENV_END: "1", "CRED_TOKEN": "s"}   # inherited: a nested launch
    env = starter_environment(base, {"MPILAUNCH_CONTROL": "a:1", "MPILAUNCH_CONTROL_TOKEN": "k"},
                              additions)
    assert list(env) == ["PATH", "CRED_TOKEN", "MPILAUNCH_CONTROL", "MPILAUNCH_CONTROL_TOKEN",
                         "HYDRA_LAUNCHER_EXTRA_ARGS", hydra.ENV_END]
    assert env["HYDRA_LAUNCHER_EXTRA_ARGS"] == "-p 2222"
