"""framework_env: exact child environments for environments recorded from real starters."""
import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank.frameworkenv import FrameworkOpts, framework_env
from mpilaunch.rank.identity import read_identity

from helpers.rankenvs import HYDRA, OMPI5, OMPI41, OMPI_2NODES, SLURM

NO_OPTS = FrameworkOpts()


def ours(env, base):
    """What framework_env added or changed relative to ``base``."""
    return {k: v for k, v in env.items() if base.get(k) != v}


def test_open_mpi_5_rank1_worker_exact():
    info = read_identity(OMPI5, "vm")
    env = framework_env(info, "127.0.0.1", 28100, NO_OPTS, OMPI5)
    assert env == {**OMPI5,
                   "MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "2", "MS_SCHED_HOST": "127.0.0.1",
                   "MS_SCHED_PORT": "28100", "MS_NODE_ID": "1", "MS_TOPO_TIMEOUT": "600",
                   "RANK_ID": "1", "RANK_SIZE": "2", "DEVICE_ID": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "28100", "RANK": "1",
                   "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                   "GROUP_RANK": "0", "NODE_RANK": "0"}


def test_open_mpi_41_scheduler_exact():
    env0 = dict(OMPI41, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0",
                OMPI_COMM_WORLD_NODE_RANK="0", PMIX_RANK="0", MS_NODE_ID="7")
    info = read_identity(env0, "vm")
    env = framework_env(info, "127.0.0.1", 8118, NO_OPTS, env0, role="scheduler")
    expected = {k: v for k, v in env0.items() if k != "MS_NODE_ID"}
    expected.update({"MS_ROLE": "MS_SCHED", "MS_WORKER_NUM": "2",
                     "MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": "8118",
                     "MS_TOPO_TIMEOUT": "600", "RANK_ID": "0", "RANK_SIZE": "2",
                     "DEVICE_ID": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "8118",
                     "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                     "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "NODE_RANK": "0"})
    assert env == expected


def test_slurm_second_node_exact_overlay():
    info = read_identity(SLURM, "node-b")
    env = framework_env(info, "10.0.0.1", 29500, FrameworkOpts(cluster_time_out=120), SLURM)
    assert ours(env, SLURM) == {
        "MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "4", "MS_SCHED_HOST": "10.0.0.1",
        "MS_SCHED_PORT": "29500", "MS_NODE_ID": "3", "MS_TOPO_TIMEOUT": "120",
        "RANK_ID": "3", "RANK_SIZE": "4", "DEVICE_ID": "1", "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "NODE_RANK": "1"}


def test_hydra_with_node_index_from_agreement():
    info = read_identity(HYDRA, "node-b").with_nodes(node_index=1, num_nodes=2)
    env = framework_env(info, "10.0.0.1", 8118, NO_OPTS, HYDRA)
    assert (env["RANK"], env["LOCAL_RANK"], env["NODE_RANK"], env["GROUP_RANK"],
            env["MS_NODE_ID"]) == ("3", "1", "1", "1", "3")


def test_unknown_node_index_removes_stale_node_rank():
    user = dict(OMPI_2NODES, NODE_RANK="0", GROUP_RANK="0")
    env = framework_env(read_identity(user, "b"), "10.0.0.1", 8118, NO_OPTS, user)
    assert "NODE_RANK" not in env and "GROUP_RANK" not in env
    assert env["RANK"] == "3"


def test_identity_variables_from_the_shell_are_overridden():
    stale = {"RANK": "9", "RANK_ID": "9", "MS_NODE_ID": "9", "WORLD_SIZE": "99",
             "RANK_SIZE": "99", "LOCAL_RANK": "9", "DEVICE_ID": "9", "MS_ROLE": "MS_SCHED",
             "MS_WORKER_NUM": "99", "MASTER_ADDR": "1.2.3.4", "MASTER_PORT": "1",
             "MS_SCHED_HOST": "1.2.3.4", "MS_SCHED_PORT": "1"}
    user = {**OMPI5, **stale}
    env = framework_env(read_identity(user, "vm"), "127.0.0.1", 28100, NO_OPTS, user)
    for k in stale:
        assert env[k] != stale[k], k


def test_tuning_variables_from_the_user_are_respected():
    user = {**OMPI5, "MS_TOPO_TIMEOUT": "33", "MS_ENABLE_RECOVERY": "1",
            "MS_RECOVERY_PATH": "/ckpt/rec", "MS_NODE_TIMEOUT": "5"}
    env = framework_env(read_identity(user, "vm"), "127.0.0.1", 1, NO_OPTS, user)
    assert (env["MS_TOPO_TIMEOUT"], env["MS_ENABLE_RECOVERY"], env["MS_RECOVERY_PATH"],
            env["MS_NODE_TIMEOUT"]) == ("33", "1", "/ckpt/rec", "5")
    # an explicit --cluster-time-out beats the user's variable
    env = framework_env(read_identity(user, "vm"), "127.0.0.1", 1,
                        FrameworkOpts(cluster_time_out=44), user)
    assert env["MS_TOPO_TIMEOUT"] == "44"


@pytest.mark.parametrize("extra, opts, expected", [
    ({"ASCEND_RT_VISIBLE_DEVICES": "6,7"}, NO_OPTS, "7"),
    ({"CUDA_VISIBLE_DEVICES": "2,3,4"}, NO_OPTS, "3"),
    ({"ASCEND_RT_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}, NO_OPTS, "5"),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, FrameworkOpts(visible_devices=("8", "9")), "9"),
    ({"CUDA_VISIBLE_DEVICES": ""}, NO_OPTS, "1"),        # hidden GPUs: a CPU job still runs
    ({"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, NO_OPTS, "GPU-bb"),
])
def test_device_id_mapping(extra, opts, expected):
    user = {**OMPI5, **extra}
    env = framework_env(read_identity(user, "vm"), "127.0.0.1", 1, opts, user)
    assert env["DEVICE_ID"] == expected
    assert {k: env[k] for k in extra} == extra       # the visible list itself is untouched


@pytest.mark.parametrize("extra, opts, name", [
    ({"ASCEND_RT_VISIBLE_DEVICES": "6"}, NO_OPTS, "ASCEND_RT_VISIBLE_DEVICES"),
    ({"CUDA_VISIBLE_DEVICES": "3"}, NO_OPTS, "CUDA_VISIBLE_DEVICES"),
    ({}, FrameworkOpts(visible_devices=("0",)), "--visible-devices"),
    ({"CUDA_VISIBLE_DEVICES": "0,,1"}, NO_OPTS, "CUDA_VISIBLE_DEVICES"),
])
def test_device_list_too_short_names_the_source(extra, opts, name):
    user = {**OMPI5, **extra}
    with pytest.raises(UsageError) as err:
        framework_env(read_identity(user, "vm"), "127.0.0.1", 1, opts, user)
    assert name in str(err.value)


def test_user_env_is_not_modified():
    user = dict(OMPI5)
    framework_env(read_identity(user, "vm"), "127.0.0.1", 1, NO_OPTS, user)
    assert user == OMPI5


def test_ipv6_scheduler_bare_and_nccl_ipv6_sockets():
    """An IPv6-only cluster: MASTER_ADDR and MS_SCHED_HOST bare (MindSpore 2.10 refuses a
    bracketed one), and the ModelArts default NCCL_SOCKET_FAMILY=AF_INET becomes AF_INET6."""
    info = read_identity(HYDRA)._replace(node_index=1, num_nodes=2)
    env = framework_env(info, "fd00:231::11", 8118, NO_OPTS, {**HYDRA, "NCCL_SOCKET_FAMILY": "AF_INET"})
    assert (env["MASTER_ADDR"], env["MS_SCHED_HOST"], env["NCCL_SOCKET_FAMILY"]) == (
        "fd00:231::11", "fd00:231::11", "AF_INET6")
    v4 = framework_env(info, "10.0.0.1", 8118, NO_OPTS, {**HYDRA, "NCCL_SOCKET_FAMILY": "AF_INET"})
    assert v4["NCCL_SOCKET_FAMILY"] == "AF_INET"
