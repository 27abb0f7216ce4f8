"""msrun's whole command line: every flag `msrun --help` lists (MindSpore venv) is taken by
`mpilaunch --dry-run`; --sim_level/--sim_rank_id give the workers what msrun 2.x gives them
(mindspore/parallel/cluster/process_entity/_api.py), --rank_table_file is checked and
exported, --node_rank is accepted and said once when it is not this host's; and a real
MindSpore run under --sim_level reaches MindSpore's own DryRun check."""
import json
import os
import re
import subprocess

import pytest

from helpers.frameworks import HAVE_MS, MS_PY, MS_TRAIN, needs_ms
from helpers.launch import clean_env, mpilaunch_argv

MSRUN = os.path.join(os.path.dirname(MS_PY), "msrun")

# A value msrun accepts for each of its flags (a new msrun flag without one fails the test).
SAMPLES = {
    "--worker_num": "2", "--local_worker_num": "2", "--master_addr": "127.0.0.1",
    "--master_port": "8118", "--node_rank": "0", "--log_dir": "logs", "--join": "True",
    "--cluster_time_out": "60", "--bind_core": "True", "--bind_numa": "True",
    "--sim_level": "1", "--sim_rank_id": "1", "--rank_table_file": "RANK_TABLE",
    "--worker_log_name": "worker_{rank}.log", "--tail_worker_log": "-1",
}


def run(args, tmp_path, env=None, timeout=120):
    return subprocess.run(mpilaunch_argv(*args), env=env or clean_env(TMPDIR=str(tmp_path)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def msrun_flags():
    out = subprocess.run([MSRUN, "--help"], capture_output=True, text=True, timeout=120,
                         env=clean_env()).stdout
    flags = sorted(set(re.findall(r"^\s+(--\w+)", out, re.M)) - {"--help"})
    assert "--worker_num" in flags and "--sim_level" in flags, out
    return flags


@pytest.mark.skipif(not HAVE_MS or not os.access(MSRUN, os.X_OK), reason=f"no msrun at {MSRUN}")
def test_every_flag_of_msrun_help_is_taken(tmp_path):
    flags = msrun_flags()
    assert sorted(set(flags) - set(SAMPLES)) == []       # a sample for each, so none is skipped
    (tmp_path / "RANK_TABLE").write_text('{"server_list": []}')
    (tmp_path / "train.py").write_text("pass\n")
    argv = [tok for flag in flags for tok in (flag, SAMPLES[flag])]
    p = run(["--dry-run", *argv, "train.py"], tmp_path)
    assert p.returncode == 0, (argv, p.stderr)
    assert p.stderr == ""                   # --node_rank 0 is this host's: nothing to say
    cmd = [ln for ln in p.stdout.splitlines() if "_boot.py" in ln][0]
    # --worker_num 2 with --sim_rank_id 1: one process, simulating rank 1 of 2
    assert " -np 1 " in cmd and "--sim-level 1 --sim-rank-id 1 --sim-world 2" in cmd
    assert f"--rank-table-file {tmp_path / 'RANK_TABLE'}" in cmd and "--no-scheduler" in cmd
    assert "--bind-numa True" in cmd and "--bind-core True" in cmd
    # each alone too: a flag refused only next to another would hide behind it
    for flag in flags:
        extra = ["--sim_level", "0"] if flag == "--sim_rank_id" else []
        p = run(["--dry-run", "-np", "2", flag, SAMPLES[flag], *extra, "train.py"], tmp_path)
        assert p.returncode == 0, (flag, p.stderr)


ENV_DUMP = r'''
import json, os, sys
keys = ("MS_SIMULATION_LEVEL", "RANK_ID", "RANK_SIZE", "MS_WORKER_NUM", "MS_NODE_ID", "MS_ROLE",
        "MS_SCHED_HOST", "MS_SCHED_PORT", "RANK_TABLE_FILE", "DEVICE_ID")
print("ENV " + json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
'''


def logs(tmp_path):
    return sorted(n for n in os.listdir(tmp_path / "logs") if n.endswith(".log"))


def envs(p):
    return [json.loads(ln.split("ENV ", 1)[1]) for ln in p.stdout.splitlines() if "ENV {" in ln]


def test_sim_rank_id_runs_one_process_with_msruns_variables(tmp_path):
    (tmp_path / "dump.py").write_text(ENV_DUMP)
    (tmp_path / "rt.json").write_text("{}")
    env = clean_env(TMPDIR=str(tmp_path), MS_ROLE="MS_WORKER", MS_SCHED_PORT="1")   # stale ones
    p = run(["-np", "4", "--master_port", "0", "--sim_level", "1", "--sim_rank_id", "3", "--rank_table_file", "rt.json",
             "--log_dir", "logs", "dump.py"], tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert envs(p) == [{"MS_SIMULATION_LEVEL": "1", "RANK_ID": "3", "RANK_SIZE": "4",
                        "MS_WORKER_NUM": "4", "MS_NODE_ID": None, "MS_ROLE": None,
                        "MS_SCHED_HOST": None, "MS_SCHED_PORT": None,
                        "RANK_TABLE_FILE": str(tmp_path / "rt.json"), "DEVICE_ID": "0"}]
    assert logs(tmp_path) == ["worker_0.log"]      # no scheduler


def test_sim_level_alone_runs_every_rank_without_a_scheduler(tmp_path):
    (tmp_path / "dump.py").write_text(ENV_DUMP)
    p = run(["-np", "2", "--master_port", "0", "--sim_level", "0", "--scheduler", "--log_dir", "logs",
             "dump.py"], tmp_path)
    assert p.returncode == 0, p.stderr
    got = sorted(envs(p), key=lambda e: e["RANK_ID"])
    assert [(e["MS_SIMULATION_LEVEL"], e["RANK_ID"], e["RANK_SIZE"], e["MS_NODE_ID"], e["MS_ROLE"],
             e["MS_SCHED_HOST"]) for e in got] == [("0", "0", "2", "0", None, None),
                                                   ("0", "1", "2", "1", None, None)]
    assert logs(tmp_path) == ["worker_0.log", "worker_1.log"]


@pytest.mark.parametrize("args,expected", [
    (["--sim_level", "4"], "--sim_level='4': out of range; give 0, 1, 2 or 3 (MindSpore's simulation levels)"),
    (["--sim_rank_id", "0"], "--sim_rank_id=0: only with --sim_level (or MS_SIMULATION_LEVEL): it picks the one rank DryRun simulates"),
    (["--sim_level", "1", "--sim_rank_id", "2"], "--sim_rank_id='2': out of range; give a rank of the simulated job, 0 to 1 (-np 2)"),
    (["--rank_table_file", "missing.json"], "--rank_table_file='missing.json': no such file; give the path of the Ascend rank table JSON"),
    (["--rank_table_file", "."], "--rank_table_file='.': not a readable file; give the path of the Ascend rank table JSON"),
    (["--node_rank", "x"], "--node_rank='x': not a whole number; give a whole number at least -1"),
])
def test_bad_values_are_one_line_and_exit_2(args, expected, tmp_path):
    (tmp_path / "t.py").write_text("open('ran', 'w')\n")
    p = run(["-np", "2", *args, "t.py"], tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"mpilaunch: error: {expected}\n")
    assert sorted(os.listdir(tmp_path)) == ["t.py"]


def test_node_rank_is_accepted_and_said_once_when_not_this_hosts(tmp_path):
    (tmp_path / "t.py").write_text("pass\n")
    p = run(["--dry-run", "-np", "1", "--node_rank", "2", "t.py"], tmp_path)
    assert p.returncode == 0
    assert p.stderr == ("mpilaunch: --node_rank=2 ignored: under one mpirun each host's node index "
                        "(GROUP_RANK, NODE_RANK) is the starter's (mpirun's); this host is node 0 of 1\n")
    for same in ("0", "-1"):
        p = run(["--dry-run", "-np", "1", "--node_rank", same, "t.py"], tmp_path)
        assert (p.returncode, p.stderr) == (0, "")


@needs_ms
@pytest.mark.mindspore
def test_a_real_mindspore_sim_level_run_reaches_mindspores_dryrun(tmp_path):
    """MindSpore 2.x refuses DryRun on CPU for a distributed job (communication/management.py:
    'Dryrun is not supported on CPU device for a distributed job.'): under mpilaunch the
    sample gets exactly that refusal, so MS_SIMULATION_LEVEL reached MindSpore's init(), and
    no scheduler was started for it."""
    env = clean_env(TMPDIR=str(tmp_path), MPILAUNCH_EXAMPLE_OUT=str(tmp_path / "out"))
    p = subprocess.run([os.path.join(os.path.dirname(MS_PY), "mpilaunch"), "-np", "2",
                        "--master_port", "0", "--sim_level", "1", "--sim_rank_id", "1", "--log_dir", "logs", MS_TRAIN,
                        "--steps", "1"], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 1, p.stdout + p.stderr
    log = (tmp_path / "logs" / "worker_0.log").read_text()
    assert "RuntimeError: Dryrun is not supported on CPU device for a distributed job." in log
    assert logs(tmp_path) == ["worker_0.log"]
