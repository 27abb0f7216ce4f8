"""The rank side's pure plan (mpilaunch/rank/plan.py): exact children (role, argv, env, log
path, CPUs, tail prefix, stdin) and exact --exec argv/env, from the adapter's own argv."""
import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank import plan
from mpilaunch.rank.identity import RankInfo
from mpilaunch.rank.options import parse_args
from mpilaunch.rank.plan import ChildSpec, ExecPlan

ARGV = ["/py/bin/python3", "/job/train.py", "--lr", "0.1"]
USER = {"PATH": "/usr/bin", "HOME": "/root", "MS_TOPO_TIMEOUT": "900", "RANK": "9"}


def opts(*flags):
    return parse_args([*flags, "--", "/job/train.py", "--lr", "0.1"], cpu_count=8)


def info(rank, size, local_rank, local_size, node_index, num_nodes, host="node-a"):
    return RankInfo(rank, size, local_rank, local_size, node_index, num_nodes, host, "openmpi")


def env(rank, size, local_rank, local_size, node, addr="127.0.0.1", port=8118, role="worker",
        device=None, topo="900", **extra):
    e = dict(USER, MS_ROLE="MS_WORKER" if role == "worker" else "MS_SCHED",
             MS_WORKER_NUM=str(size), MS_SCHED_HOST=addr, MS_SCHED_PORT=str(port),
             MS_NODE_ID=str(rank), MS_TOPO_TIMEOUT=topo, RANK_ID=str(rank), RANK_SIZE=str(size),
             DEVICE_ID=str(local_rank if device is None else device), MASTER_ADDR=addr,
             MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(size),
             LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE=str(local_size),
             GROUP_RANK=str(node), NODE_RANK=str(node), **extra)
    if role == "scheduler":
        del e["MS_NODE_ID"]
    return e


def test_rank0_worker_and_scheduler_every_rank_tailed():
    o = opts("--log-dir", "/logs", "--master-port", "28100")
    got = plan.children(o, info(0, 2, 0, 2, 0, 1), "127.0.0.1", 28100, USER, ARGV, "node-a")
    assert got == [
        ChildSpec(role="scheduler", argv=ARGV, env=env(0, 2, 0, 2, 0, port=28100, role="scheduler"),
                  log_path="/logs/scheduler.log", tail_prefix=None, cpus=None, inherit_stdin=False),
        ChildSpec(role="worker", argv=ARGV, env=env(0, 2, 0, 2, 0, port=28100),
                  log_path="/logs/worker_0.log", tail_prefix=b"[rank0] ", cpus=None,
                  inherit_stdin=True),
    ]


def test_rank1_has_no_scheduler_and_tail_selects_ranks():
    o = opts("--tail-worker-log", "0,3", "--cluster-time-out", "77")
    got = plan.children(o, info(1, 4, 1, 4, 0, 1), "127.0.0.1", 8118, USER, ARGV, "node-a")
    assert got == [ChildSpec("worker", ARGV, env(1, 4, 1, 4, 0, topo="77"), "./worker_1.log",
                             None, None, True)]
    got = plan.children(o, info(3, 4, 3, 4, 0, 1), "127.0.0.1", 8118, USER, ARGV, "node-a")
    assert got[0].tail_prefix == b"[rank3] "
    o = opts("--tail-worker-log", "none")
    got = plan.children(o, info(0, 1, 0, 1, 0, 1), "127.0.0.1", 8118, USER, ARGV, "node-a")
    assert [(c.role, c.tail_prefix) for c in got] == [("scheduler", None), ("worker", None)]


def test_no_scheduler_on_rank0():
    o = opts("--no-scheduler", "--log-dir", "/logs")
    got = plan.children(o, info(0, 1, 0, 1, 0, 1), "127.0.0.1", 8118, USER, ARGV, "node-a")
    torchrun = {"ROLE_RANK": "0", "ROLE_NAME": "default", "ROLE_WORLD_SIZE": "1",
                "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
                "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
                "TORCHELASTIC_ERROR_FILE": "/logs/error_0.json"}   # a torch job's worker
    assert got == [ChildSpec("worker", ARGV, env(0, 1, 0, 1, 0, **torchrun), "/logs/worker_0.log",
                             b"[rank0] ", None, True)]


def test_log_name_placeholders():
    assert plan.needs_local_ip(opts("--worker-log-name", "w_{ip}.log"))
    assert not plan.needs_local_ip(opts("--worker-log-name", "w_{hostname}_{rank}.log"))
    o = opts("--log-dir", "/logs", "--worker-log-name", "w_{hostname}_{ip}_{rank}.txt")
    got = plan.children(o, info(5, 8, 1, 4, 1, 2), "10.0.0.1", 8118, USER, ARGV, "node-b",
                        ip="10.0.0.2")
    assert got[0].log_path == "/logs/w_node-b_10.0.0.2_5.txt"


def test_gloo_socket_ifname_only_across_hosts_and_only_when_unset():
    across = info(2, 4, 0, 2, 1, 2, host="node-b")
    o = opts("--master-addr", "10.0.0.1")
    assert plan.needs_gloo_ifname(across, USER)
    [w] = plan.children(o, across, "10.0.0.1", 8118, USER, ARGV, "node-b", gloo_ifname="eth1")
    assert w.env == env(2, 4, 0, 2, 1, addr="10.0.0.1", GLOO_SOCKET_IFNAME="eth1")
    # the user's own value wins
    user = dict(USER, GLOO_SOCKET_IFNAME="ib0")
    assert not plan.needs_gloo_ifname(across, user)
    [w] = plan.children(o, across, "10.0.0.1", 8118, user, ARGV, "node-b", gloo_ifname="eth1")
    assert w.env["GLOO_SOCKET_IFNAME"] == "ib0"
    # no interface found (loopback): nothing set
    [w] = plan.children(o, across, "10.0.0.1", 8118, USER, ARGV, "node-b", gloo_ifname=None)
    assert "GLOO_SOCKET_IFNAME" not in w.env
    # one host: never
    single = info(1, 2, 1, 2, 0, 1)
    assert not plan.needs_gloo_ifname(single, USER)
    [w] = plan.children(opts(), single, "127.0.0.1", 8118, USER, ARGV, "node-a", gloo_ifname="eth1")
    assert "GLOO_SOCKET_IFNAME" not in w.env
    # the scheduler's environment is rank 0's without it (as before the split)
    s, w = plan.children(opts(), info(0, 4, 0, 2, 0, 2), "10.0.0.1", 8118, USER, ARGV, "node-a",
                         gloo_ifname="eth0")
    assert "GLOO_SOCKET_IFNAME" not in s.env and w.env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_bind_core_cpus():
    cpus = list(range(8))
    o = opts("--bind-core", "True")
    s, w = plan.children(o, info(0, 3, 0, 3, 0, 1), "127.0.0.1", 8118, USER, ARGV, "h",
                         cpus=cpus, numa_nodes=[])
    assert (s.cpus, w.cpus) == ([0, 1], [2, 3])
    [w] = plan.children(o, info(2, 3, 2, 3, 0, 1), "127.0.0.1", 8118, USER, ARGV, "h",
                        cpus=cpus, numa_nodes=[])
    assert w.cpus == [6, 7]
    # node 1 has no scheduler: its ranks split all CPUs
    [w] = plan.children(o, info(3, 4, 1, 2, 1, 2), "10.0.0.1", 8118, USER, ARGV, "h",
                        cpus=cpus, numa_nodes=[])
    assert w.cpus == [4, 5, 6, 7]
    # msrun's dict: keyed by DEVICE_ID (here from --visible-devices)
    o = opts("--bind-core", '{"scheduler":["0"],"device6":["1-2"]}', "--visible-devices", "6,7")
    s, w = plan.children(o, info(0, 2, 0, 2, 0, 1), "127.0.0.1", 8118, USER, ARGV, "h")
    assert (s.cpus, w.cpus, w.env["DEVICE_ID"]) == ([0], [1, 2], "6")
    [w] = plan.children(o, info(1, 2, 1, 2, 0, 1), "127.0.0.1", 8118, USER, ARGV, "h")
    assert (w.cpus, w.env["DEVICE_ID"]) == (None, "7")


def test_check_before_anything_starts():
    plan.check(opts("--tail-worker-log", "1"), info(1, 2, 1, 2, 0, 1), USER)
    with pytest.raises(UsageError, match="--tail-worker-log: rank 2 does not exist"):
        plan.check(opts("--tail-worker-log", "0,2"), info(1, 2, 1, 2, 0, 1), USER)
    with pytest.raises(UsageError, match="--visible-devices"):
        plan.check(opts("--visible-devices", "0"), info(1, 2, 1, 2, 0, 1), USER)
    pmix = RankInfo(1, None, None, None, None, None, "h", "pmix")
    plan.check(opts("--tail-worker-log", "7"), pmix, USER)        # size unknown yet


def test_exec_runs_python_under_mpi4py():
    o = opts("--exec", "--master-port", "29500")
    got = plan.exec_plan(o, info(1, 2, 1, 2, 0, 1), "127.0.0.1", USER, ARGV, own_python=True)
    assert got == ExecPlan(
        ["/py/bin/python3", "-m", "mpi4py", "/job/train.py", "--lr", "0.1"],
        env(1, 2, 1, 2, 0, port=29500), None)
    # another interpreter (mpi4py unknown) or an executable: exec as is
    assert plan.exec_plan(o, info(1, 2, 1, 2, 0, 1), "127.0.0.1", USER, ARGV,
                          own_python=False).argv == ARGV
    o = parse_args(["--exec", "--no-python", "--", "hostname"])
    assert plan.exec_plan(o, info(0, 1, 0, 1, 0, 1), "127.0.0.1", USER, ["hostname"],
                          own_python=True).argv == ["hostname"]


def test_exec_across_hosts_without_node_index_and_with_bind_core():
    o = opts("--exec", "--master-addr", "10.0.0.1", "--bind-core", "True")
    far = info(3, 4, 1, 2, None, None, host="node-b")
    got = plan.exec_plan(o, far, "10.0.0.1", USER, ARGV, own_python=True,
                         cpus=[0, 1, 2, 3], numa_nodes=[])
    expected = env(3, 4, 1, 2, 0, addr="10.0.0.1")
    del expected["GROUP_RANK"], expected["NODE_RANK"]
    assert got.env == expected and got.cpus == [2, 3]


@pytest.mark.parametrize("flags, rank_info, needle", [
    (("--exec", "--master-port", "0"), info(0, 1, 0, 1, 0, 1),
     "--exec cannot use --master-port 0"),
    (("--exec",), info(2, 4, 0, 2, None, None), "--exec with ranks on several hosts needs --master-addr"),
    (("--exec",), RankInfo(0, None, None, None, None, None, "h", "pmix"),
     r"--exec: the starter \(pmix\) does not give the world size"),
])
def test_exec_check(flags, rank_info, needle):
    with pytest.raises(UsageError, match=needle):
        plan.exec_check(opts(*flags), rank_info)


@pytest.mark.parametrize("flags, message", [
    (("--master-port", "70000"), "--master-port='70000': out of range; give 0 (pick a free "
     "port) or a port between 1024 and 65535"),
    (("--master-port", "x"), "--master-port='x': not a whole number; give 0 (pick a free "
     "port) or a port between 1024 and 65535"),
    (("--cluster-time-out", "0"), "--cluster-time-out='0': out of range; give a whole number "
     "at least 1"),
    (("--scheduler-grace", "-1"), "--scheduler-grace='-1': out of range; give a number of "
     "seconds, 0 or more"),
    (("--tail-worker-log", "1,x"), "--tail-worker-log='1,x': not a rank list; give -1 (every "
     "rank), none, or a comma list of ranks such as 0,3"),
])
def test_option_numbers_use_the_contract_style(flags, message):
    with pytest.raises(UsageError) as err:
        opts(*flags)
    assert str(err.value) == message


def test_options_defaults():
    o = parse_args(["--", "s.py"])
    assert (o.log_dir, o.worker_log_name, o.tail, o.master_addr, o.master_port, o.no_scheduler,
            o.cluster_time_out, o.bind, o.visible_devices, o.scheduler_grace, o.exec_,
            o.no_python, o.python, o.command) == (
        ".", "worker_{rank}.log", None, None, 8118, False, None, None, None, 300.0, False,
        False, None, ["s.py"])


def test_scheduler_copy_never_carries_the_mpi_identity():
    # was: the scheduler copy inherited OMPI_COMM_WORLD_RANK=0 etc.; an MPI script in it called
    # MPI_Init as a second rank 0 and broke PMIx for the job
    mpi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "PMIX_RANK": "0",
           "PMIX_NAMESPACE": "prterun-x@1", "PMI_RANK": "0", "MPI_LOCALRANKID": "0",
           "OMPI_MCA_ess_base_jobid": "1"}
    sched, worker = plan.children(opts(), info(0, 2, 0, 2, 0, 1), "127.0.0.1", 8118,
                                  dict(USER, **mpi), ARGV, "node-a")
    assert sched.role == "scheduler" and sched.env == env(0, 2, 0, 2, 0, role="scheduler")
    assert worker.env == env(0, 2, 0, 2, 0, **mpi)     # the worker is the rank
    assert worker.inherit_stdin and not sched.inherit_stdin


def test_module_runs_as_python_m_and_under_mpi4py_with_exec():
    o = parse_args(["--python", "/usr/bin/python3", "--module", "--", "mpi4py.bench", "helloworld"])
    from mpilaunch.rank.options import worker_argv
    argv = worker_argv(o, "/usr/bin")
    assert argv == ["/usr/bin/python3", "-m", "mpi4py.bench", "helloworld"]
    o = parse_args(["--exec", "--no-port-check", "--python", "/usr/bin/python3", "--module", "--",
                    "mpi4py.bench", "helloworld"])
    assert not o.port_check
    assert plan.exec_plan(o, info(0, 2, 0, 2, 0, 1), "127.0.0.1", USER, argv,
                          own_python=True).argv == [
        "/usr/bin/python3", "-m", "mpi4py", "-m", "mpi4py.bench", "helloworld"]
    with pytest.raises(UsageError):
        worker_argv(parse_args(["--no-python", "--module", "--", "x"]), "/usr/bin")
