"""A torch worker's environment is a superset of torchrun's (rank/frameworkenv.py): exact
overlays, torchrun's OMP_NUM_THREADS rule, no agent store, and the plan's error file and
run id (rank/plan.py)."""
import ast
import importlib.util
import os

from mpilaunch import contract
from mpilaunch.rank import plan
from mpilaunch.rank.frameworkenv import FrameworkOpts, framework_env
from mpilaunch.rank.identity import RankInfo, read_identity
from mpilaunch.rank.options import parse_args

from helpers.rankenvs import OMPI5, OMPI_2NODES

TORCH = FrameworkOpts(torch=True, run_id="job-7", restart_count=2, max_restarts=3,
                      error_file="/logs/attempt2/error_1.json")


def added(opts, user, info=None):
    """What the torch options add to (or remove from) the environment of the same rank."""
    info = info or read_identity(user, "vm")
    plain = framework_env(info, "127.0.0.1", 28100, FrameworkOpts(), user)
    env = framework_env(info, "127.0.0.1", 28100, opts, user)
    return ({k: v for k, v in env.items() if plain.get(k) != v},
            sorted(k for k in plain if k not in env))


def test_open_mpi_rank1_exact_overlay():
    assert added(TORCH, OMPI5) == ({
        "ROLE_RANK": "1", "ROLE_NAME": "default", "ROLE_WORLD_SIZE": "2",
        "GROUP_WORLD_SIZE": "1",
        "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3",
        "TORCHELASTIC_RUN_ID": "job-7", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "TORCHELASTIC_ERROR_FILE": "/logs/attempt2/error_1.json", "OMP_NUM_THREADS": "1"}, [])


def test_defaults_without_restarts_or_id_are_torchruns():
    got, _ = added(FrameworkOpts(torch=True), OMPI5)
    assert (got["TORCHELASTIC_RESTART_COUNT"], got["TORCHELASTIC_MAX_RESTARTS"],
            got["TORCHELASTIC_RUN_ID"]) == ("0", "0", "none")
    assert "TORCHELASTIC_ERROR_FILE" not in got


def test_users_tuning_stands_and_one_rank_per_node_gets_no_omp():
    user = dict(OMPI5, OMP_NUM_THREADS="4", TORCH_NCCL_ASYNC_ERROR_HANDLING="3",
                TORCHELASTIC_SIGNALS_TO_HANDLE="SIGTERM")
    got, _ = added(TORCH, user)
    assert "OMP_NUM_THREADS" not in got and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in got
    assert "TORCHELASTIC_SIGNALS_TO_HANDLE" not in got
    alone = RankInfo(0, 2, 0, 1, 0, 2, "a", "openmpi")
    got, _ = added(TORCH, OMPI5, info=alone)
    assert "OMP_NUM_THREADS" not in got and got["GROUP_WORLD_SIZE"] == "2"


def test_unknown_node_count_removes_a_stale_group_world_size():
    user = dict(OMPI_2NODES, GROUP_WORLD_SIZE="9")
    env = framework_env(read_identity(user, "b"), "10.0.0.1", 8118, TORCH, user)
    assert "GROUP_WORLD_SIZE" not in env and "GROUP_RANK" not in env
    assert env["ROLE_WORLD_SIZE"] == "4"


def test_agent_store_never_reaches_any_process():
    user = dict(OMPI5, TORCHELASTIC_USE_AGENT_STORE="True", TORCH_NPU_ELASTIC_USE_AGENT_STORE="1")
    info = read_identity(user, "vm")
    for opts, role in ((TORCH, "worker"), (FrameworkOpts(), "worker"),
                       (FrameworkOpts(), "scheduler")):
        env = framework_env(info, "127.0.0.1", 1, opts, user, role=role)
        assert "TORCHELASTIC_USE_AGENT_STORE" not in env
        assert "TORCH_NPU_ELASTIC_USE_AGENT_STORE" not in env


def test_the_scheduler_gets_none_of_torchruns_variables():
    env = framework_env(read_identity(OMPI5, "vm"), "127.0.0.1", 1, TORCH, OMPI5, role="scheduler")
    assert not [k for k in env if k.startswith(("TORCHELASTIC_", "ROLE_"))]
    assert "OMP_NUM_THREADS" not in env


def _torch_agent_keys():
    """The names torch's local agent puts in every worker's env, read from the installed
    torch's source (its worker_env dict literal in _start_workers)."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        import pytest

        pytest.skip("torch is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "distributed", "elastic", "agent",
                        "server", "local_elastic_agent.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(getattr(t, "id", None) == "worker_env" for t in node.targets)):
            return {k.value for k in node.value.keys}
    raise AssertionError(f"no worker_env dict in {path}")


def test_superset_of_the_installed_torch_agents_variables():
    keys = _torch_agent_keys()
    assert "TORCHELASTIC_RUN_ID" in keys and len(keys) >= 14
    env = framework_env(read_identity(OMPI5, "vm"), "127.0.0.1", 1, TORCH, OMPI5)
    missing = keys - set(env) - {"TORCHELASTIC_USE_AGENT_STORE"}
    assert not missing
    assert {"LOCAL_RANK", "OMP_NUM_THREADS", "TORCHELASTIC_ERROR_FILE"} <= set(env)


def _opts(*flags):
    return parse_args([*flags, "--", "/job/train.py"], cpu_count=8)


def test_plan_torch_job_error_file_beside_the_log_and_run_id():
    o = _opts("--log-dir", "/logs/attempt1", "--no-scheduler", "--run-id", "job-7",
              "--restart-count", "1", "--max-restarts", "2")
    info = RankInfo(1, 2, 1, 2, 0, 1, "a", "openmpi")
    [worker] = plan.children(o, info, "127.0.0.1", 1, {}, ["/py", "/job/train.py"], "a")
    assert worker.env["TORCHELASTIC_ERROR_FILE"] == contract.error_file_path(
        "/logs/attempt1", 1) == "/logs/attempt1/error_1.json"
    assert os.path.dirname(worker.log_path) == "/logs/attempt1"
    assert (worker.env["TORCHELASTIC_RUN_ID"], worker.env["TORCHELASTIC_RESTART_COUNT"],
            worker.env["TORCHELASTIC_MAX_RESTARTS"]) == ("job-7", "1", "2")


def test_plan_mindspore_job_and_exec_are_unchanged():
    info = RankInfo(0, 2, 0, 2, 0, 1, "a", "openmpi")
    ms = plan.children(_opts("--log-dir", "/l", "--run-id", "x"), info, "127.0.0.1", 1, {},
                       ["/py", "/job/train.py"], "a")
    ex = plan.exec_plan(_opts("--exec", "--no-scheduler", "--run-id", "x"), info, "127.0.0.1",
                        {}, ["/py", "/job/train.py"], own_python=False)
    for env in [c.env for c in ms] + [ex.env]:
        assert not [k for k in env if k.startswith(("TORCHELASTIC_", "ROLE_", "OMP_"))]


def test_rank0_says_what_torchrun_says_only_when_it_set_omp():
    from mpilaunch.rank.frameworkenv import omp_note

    assert omp_note({}, {"OMP_NUM_THREADS": "1"}) == (
        "mpilaunch: OMP_NUM_THREADS=1 for every worker (not set, and more than one rank per "
        "host), as torchrun does; set OMP_NUM_THREADS to choose\n")
    assert omp_note({"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "1"}) is None
    assert omp_note({}, {}) is None
