"""read_identity on environments recorded from real starters (mpirun, mpiexec, srun), rank 1 of 2
unless noted."""
import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank.identity import RankInfo, parse_tasks_per_node, read_identity

from helpers.rankenvs import HYDRA, OMPI5, OMPI41, OMPI_2NODES, PMIX_ONLY, SLURM


def test_open_mpi_5_single_node():
    assert read_identity(OMPI5, "vm") == RankInfo(
        rank=1, size=2, local_rank=1, local_size=2, node_index=0, num_nodes=1,
        hostname="vm", starter="openmpi")


def test_open_mpi_41_single_node():
    assert read_identity(OMPI41, "vm") == RankInfo(
        rank=1, size=2, local_rank=1, local_size=2, node_index=0, num_nodes=1,
        hostname="vm", starter="openmpi")


def test_open_mpi_multi_node_has_no_node_index():
    # OMPI_COMM_WORLD_NODE_RANK=1 is the rank within the node, not node 1.
    assert read_identity(OMPI_2NODES, "node-b") == RankInfo(
        rank=3, size=4, local_rank=1, local_size=2, node_index=None, num_nodes=None,
        hostname="node-b", starter="openmpi")


def test_hydra():
    assert read_identity(HYDRA, "node-b") == RankInfo(
        rank=3, size=4, local_rank=1, local_size=2, node_index=None, num_nodes=None,
        hostname="node-b", starter="hydra")


def test_slurm():
    assert read_identity(SLURM, "node-b") == RankInfo(
        rank=3, size=4, local_rank=1, local_size=2, node_index=1, num_nodes=2,
        hostname="node-b", starter="slurm")


def test_slurm_uneven_tasks_per_node():
    env = dict(SLURM, SLURM_PROCID="4", SLURM_NTASKS="5", SLURM_NODEID="2", SLURM_LOCALID="0",
               SLURM_NNODES="3", SLURM_STEP_TASKS_PER_NODE="2(x2),1")
    info = read_identity(env, "c")
    assert (info.rank, info.local_size, info.node_index, info.num_nodes) == (4, 1, 2, 3)


def test_pmix_only_is_incomplete():
    info = read_identity(PMIX_ONLY, "vm")
    assert info == RankInfo(rank=2, size=None, local_rank=None, local_size=None,
                            node_index=None, num_nodes=None, hostname="vm", starter="pmix")
    assert not info.complete


def test_open_mpi_wins_over_stale_slurm_of_the_batch_step():
    env = dict(OMPI5, SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0", SLURM_NODEID="0",
               SLURM_TASKS_PER_NODE="1")
    assert read_identity(env, "vm").starter == "openmpi"


def test_hydra_inside_slurm_allocation():
    env = dict(HYDRA, SLURM_PROCID="0", SLURM_NODEID="0", SLURM_TASKS_PER_NODE="1")
    assert read_identity(env, "x").starter == "hydra"


def test_srun_pmi2_without_hydra_localid_is_slurm():
    env = dict(SLURM, PMI_RANK="3", PMI_SIZE="4")
    assert read_identity(env, "x").starter == "slurm"


@pytest.mark.parametrize("env, name", [
    ({}, "OMPI_COMM_WORLD_RANK"),
    ({**OMPI5, "OMPI_COMM_WORLD_SIZE": "two"}, "OMPI_COMM_WORLD_SIZE"),
    ({k: v for k, v in OMPI5.items() if k != "OMPI_COMM_WORLD_LOCAL_RANK"},
     "OMPI_COMM_WORLD_LOCAL_RANK"),
    ({**OMPI5, "OMPI_COMM_WORLD_RANK": "2"}, "OMPI_COMM_WORLD_RANK"),
    ({**OMPI5, "OMPI_COMM_WORLD_RANK": "-1"}, "OMPI_COMM_WORLD_RANK"),
    ({**OMPI5, "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ({**OMPI5, "OMPI_COMM_WORLD_SIZE": "0"}, "OMPI_COMM_WORLD_SIZE"),
    ({**HYDRA, "PMI_SIZE": ""}, "PMI_SIZE"),
    ({k: v for k, v in HYDRA.items() if k != "MPI_LOCALNRANKS"}, "MPI_LOCALNRANKS"),
    ({**SLURM, "SLURM_STEP_TASKS_PER_NODE": "2(x"}, "SLURM_STEP_TASKS_PER_NODE"),
    ({**SLURM, "SLURM_NODEID": "5", "SLURM_NNODES": "6"}, "SLURM_NODEID"),
    ({**SLURM, "SLURM_LOCALID": "x"}, "SLURM_LOCALID"),
    ({"PMIX_RANK": "r"}, "PMIX_RANK"),
])
def test_bad_or_missing_value_names_the_variable(env, name):
    with pytest.raises(UsageError) as err:
        read_identity(env, "h")
    assert name in str(err.value)
    assert "\n" not in str(err.value)


def test_parse_tasks_per_node():
    assert parse_tasks_per_node("X", "2(x3),1") == [2, 2, 2, 1]
    assert parse_tasks_per_node("X", "4") == [4]
