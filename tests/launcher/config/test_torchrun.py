"""torchrun's flags and Kubeflow Trainer's PET_* variables (mpilaunch/config/torchrun.py):
taken with their meaning, checked against the hosts and slots (a mismatch is one line naming
both), refused in one line where they have none."""
import pytest

from helpers.launch import build_config
from mpilaunch.config import torchrun
from mpilaunch.errors import UsageError


def build(argv, env, tmp_path):
    return build_config(argv, env, tmp_path, "import torch\n")


@pytest.mark.parametrize("argv, env, message", [
    (["--nnodes", "2"], {}, "--nnodes=2 but no host list was given (this machine only: -H, --hostfile or an allocation); make them agree"),
    ([], {"PET_NNODES": "3", "PET_NPROC_PER_NODE": "2"}, "PET_NNODES=3 but -H lists 2 host(s); make them agree"),
    (["--nnodes", "3:4"], {}, "--nnodes=3:4 (MIN:MAX hosts) but -H lists 2 host(s); make them agree"),
    (["--nnodes", "4:2"], {}, "--nnodes='4:2': MIN is above MAX; give MIN:MAX such as 1:4"),
    (["--nproc-per-node", "4"], {}, "--nproc-per-node=4 but -H gives a 2 slot(s); make them agree (or leave --nproc-per-node out)"),
    (["--nproc_per_node", "2", "-np", "3"], {}, "--np=3 but --nproc-per-node=2 on 2 host(s) makes 4 ranks; make them agree"),
    (["--nproc-per-node", "x"], {}, "--nproc-per-node='x': not a whole number; give a number of ranks per host, or auto"),
    (["--standalone"], {}, "--standalone runs on one host, but -H lists 2 hosts; leave --standalone out"),
    (["--rdzv-backend", "etcd"], {}, "--rdzv-backend='etcd': mpilaunch's ranks meet at rank 0's store, a fixed set of hosts (what static and c10d give); give static or c10d"),
    (["--rdzv-endpoint", "a:29400", "--master_addr", "b"], {}, "--rdzv-endpoint='a:29400' and --master_addr='b' disagree; give one"),
    (["--rdzv-endpoint", "a:29400", "--master-port", "29500"], {}, "--rdzv-endpoint='a:29400' and --master_port=29500 disagree; give one"),
    (["--rdzv-endpoint", "a:29400"], {"PET_MASTER_ADDR": "b"}, "--rdzv-endpoint='a:29400' and PET_MASTER_ADDR='b' disagree; give one"),
    (["--rdzv-endpoint", "a:80"], {}, "--rdzv-endpoint=80: a privileged port; give 0 (pick a free port) or a port between 1024 and 65535"),
])
def test_mismatch_or_meaningless_is_one_line(argv, env, message, tmp_path):
    hosts = [] if "--nnodes" in argv and argv[argv.index("--nnodes") + 1] == "2" else ["-H", "a:2,b:2"]
    with pytest.raises(UsageError) as err:
        build(hosts + argv, env, tmp_path)
    assert str(err.value) == message


def test_nproc_per_node_is_this_machines_slots(tmp_path):
    cfg = build(["--nproc-per-node", "3", "--nnodes", "1"], {}, tmp_path)
    assert [(h.name, h.slots) for h in cfg.hosts] == [("localhost", 3)] and cfg.np == 3


def test_nproc_per_node_gives_vc_worker_hosts_their_slots(tmp_path):
    cfg = build([], {"VC_WORKER_HOSTS": "w0,w1", "PET_NPROC_PER_NODE": "2", "PET_NNODES": "2"},
                tmp_path)
    assert [(h.name, h.slots) for h in cfg.hosts] == [("w0", 2), ("w1", 2)] and cfg.np == 4


def test_ma_num_gpus_still_wins_and_then_must_agree(tmp_path):
    with pytest.raises(UsageError) as err:
        build(["--nproc-per-node", "2"], {"VC_WORKER_HOSTS": "w0,w1", "MA_NUM_GPUS": "8"},
              tmp_path)
    assert str(err.value) == ("--nproc-per-node=2 but VC_WORKER_HOSTS gives w0 8 slot(s); "
                              "make them agree (or leave --nproc-per-node out)")


def test_agreeing_flags_and_kubeflow_variables_are_taken(tmp_path):
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "a",
           "PET_MASTER_PORT": "29500", "PET_NODE_RANK": "0"}
    cfg = build(["-H", "a:2,b:2", "--rdzv-backend", "c10d", "--rdzv-id", "job-42",
                 "--max-restarts", "1", "--run-path"], env, tmp_path)
    assert (cfg.np, cfg.master_addr, cfg.master_port, cfg.run_id) == (4, "a", 29500, "job-42")
    # the flag wins over the variable
    cfg = build(["-H", "a:2,b:2", "--master-port", "29600", "--nproc-per-node", "auto"], env,
                tmp_path)
    assert cfg.master_port == 29600


def test_rdzv_endpoint_is_the_master_address_and_port(tmp_path):
    cfg = build(["-H", "a:1,b:1", "--rdzv-endpoint", "a:29400", "--rdzv_backend", "static"], {},
                tmp_path)
    assert (cfg.master_addr, cfg.master_port) == ("a", 29400)
    assert torchrun.endpoint("[fd00::1]:29400") == ("fd00::1", 29400)
    assert torchrun.endpoint("node1") == ("node1", None)


def test_run_id_is_made_once_per_launch(tmp_path):
    a, b = build([], {}, tmp_path).run_id, build([], {}, tmp_path).run_id
    assert a.startswith("mpilaunch-") and len(a) == len("mpilaunch-") + 12 and a != b
    assert build([], {"PET_RDZV_ID": "kf-1"}, tmp_path).run_id == "kf-1"


def test_standalone_picks_a_free_port_unless_given(tmp_path):
    cfg = build(["--standalone", "--nproc-per-node", "2"], {}, tmp_path)
    assert cfg.master_port not in (0, 8118) and cfg.np == 2
    cfg = build(["--standalone", "--master-port", "29511"], {}, tmp_path)
    assert cfg.master_port == 29511


def test_the_rank_command_carries_the_run_id(tmp_path):
    from mpilaunch.backends import rankcmd

    cmd = rankcmd.rank_command(build(["--rdzv-id", "job-9"], {}, tmp_path))
    assert cmd[cmd.index("--run-id") + 1] == "job-9"


def test_kubeflow_node_rank_is_read_as_node_rank(tmp_path, capsys):
    build([], {"PET_NODE_RANK": "1"}, tmp_path)
    assert capsys.readouterr().err == (
        "mpilaunch: PET_NODE_RANK=1 ignored: under one mpirun each host's node index "
        "(GROUP_RANK, NODE_RANK) is the starter's (mpirun's); this host is node 0 of 1\n")
