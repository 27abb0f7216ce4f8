"""Launch lines of real projects, verbatim with ``torchrun`` replaced by ``mpilaunch``, on a
small script of ours (tests/helpers/tline/show.py, in their place): rank 0's console lines and
the exit status are torchrun's (``python3 -m torch.distributed.run``, torch 2.13). Then
torchrun's console flags on their own (``--tee 3 --local-ranks-filter 0``, ``--redirects``),
and ``PET_MAX_RESTARTS=1`` restarting a job that fails once."""
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.ports import free_port

HELPERS = os.path.join(REPO, "tests", "helpers")
SHOW = os.path.join(HELPERS, "tline", "show.py")

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch.distributed.run"],
                   capture_output=True).returncode != 0, reason="torch not installed")


def project_lines(port):
    """(name, the flags before the script, the script and its arguments): each project's line
    as it stands, its script replaced by ours (the same arguments)."""
    return [
        # torchtitan's run_train.sh
        ("torchtitan", ["--nproc_per_node=2", "--rdzv_backend", "c10d",
                        "--rdzv_endpoint=localhost:0", "--local-ranks-filter", "0", "--role",
                        "rank", "--tee", "3"],
         ["-m", "tline.show", "--job.config_file", "./llama3_debug.toml"]),
        # nanoGPT's README: one node
        ("nanoGPT", ["--standalone", "--nproc_per_node=2"],
         [SHOW, "config/train_gpt2.py"]),
        # Megatron-LM's DISTRIBUTED_ARGS (its GPT-3 example's training script)
        ("Megatron-LM", ["--nproc_per_node", "2", "--nnodes", "1", "--master_addr", "localhost",
                         "--master_port", port],
         [SHOW, "--tensor-model-parallel-size", "1", "--micro-batch-size", "1"]),
        # Hugging Face examples' README
        ("HF examples", ["--nproc_per_node", "2"],
         [SHOW, "--model_name_or_path", "google-bert/bert-base-cased", "--task_name", "mrpc"]),
    ]


PREFIX = re.compile(r"^\[(?:default)?rank(\d+)[^\]]*\]:? ?")


def console(text):
    """{rank: [its LINE lines]} of a console: torchrun's ``[rank0]:`` / ``[default0]:`` and
    mpilaunch's ``[rank0] `` prefixes taken off, each line's rank read from its text."""
    out = {}
    for line in text.splitlines():
        # torchrun's workers share its stdout unprefixed and get PYTHONUNBUFFERED=1 from it, so
        # print() writes a line and its newline in two calls: two ranks' lines can then share
        # one console line ("LINE rank=0 out ...LINE rank=1 out ..."), seen under load
        for body in re.split(r"(?=LINE rank=\d+ )", PREFIX.sub("", line)):
            m = re.match(r"LINE rank=(\d+) ", body)
            if m:
                out.setdefault(int(m.group(1)), []).append(body)
    return out


def run(launcher, flags, program, tmp_path, env=None):
    argv = ([sys.executable, "-m", "torch.distributed.run"] if launcher == "torchrun"
            else [sys.executable, "-m", "mpilaunch", "--log_dir", str(tmp_path / "logs")])
    out = subprocess.run(argv + flags + program, capture_output=True, text=True, cwd=HELPERS,
                         env=clean_env(**(env or {})), stdin=subprocess.DEVNULL, timeout=180)
    return out.returncode, console(out.stdout + out.stderr), out


@pytest.mark.parametrize("index", range(4), ids=[n for n, _, _ in project_lines("0")])
def test_a_projects_line_runs_as_under_torchrun(index, tmp_path):
    name, flags, program = project_lines(free_port())[index]
    # a line without a port takes the default one (torchrun's 29500, mpilaunch's 8118), which
    # another job of this machine may hold: both launchers read PET_MASTER_PORT
    portless = not any(f.startswith(("--master_port", "--rdzv_endpoint", "--standalone"))
                       for f in flags)
    rc_t, seen_t, out_t = run("torchrun", flags, program, tmp_path / "t",
                              env={"PET_MASTER_PORT": free_port()} if portless else None)
    if name == "Megatron-LM":   # its own free port: torchrun's store may not have let go yet
        name, flags, program = project_lines(free_port())[index]
    rc_m, seen_m, out_m = run("mpilaunch", flags, program, tmp_path / "m",
                              env={"PET_MASTER_PORT": free_port()} if portless else None)
    assert rc_t == 0, out_t.stderr
    assert rc_m == rc_t, out_m.stderr
    assert sorted(seen_m.get(0, [])) == sorted(seen_t.get(0, [])), (out_t, out_m)
    assert len(seen_t.get(0, [])) == 2           # its stdout line and its stderr line
    assert sorted(seen_m) == sorted(seen_t), (out_t, out_m)   # the ranks on the console


def test_tee_3_local_ranks_filter_0_shows_rank_0_alone_and_logs_both(tmp_path):
    rc, seen, out = run("mpilaunch", ["--nproc_per_node", "2", "--master_port", "0", "--tee", "3",
                                      "--local-ranks-filter", "0"], [SHOW], tmp_path)
    assert rc == 0, out.stderr
    assert sorted(seen) == [0]
    for r in (0, 1):
        log = (tmp_path / "logs" / f"worker_{r}.log").read_text()
        assert sorted(log.splitlines()) == sorted(
            [f"LINE rank={r} err", f"LINE rank={r} out world=2 local={r} role=default "
                                   "restart=0 args=[]"]), log


@pytest.mark.parametrize("redirects, shown", [("3", {}), ("0:1,1:2", {0: ["err"], 1: ["out"]})])
def test_redirects_keep_streams_off_the_console_and_in_the_logs(redirects, shown, tmp_path):
    rc, seen, out = run("mpilaunch", ["--nproc_per_node", "2", "--master_port", "0",
                                      "--redirects", redirects, "--log-dir",
                                      str(tmp_path / "logs")], [SHOW], tmp_path)
    assert rc == 0, out.stderr
    assert {r: [ln.split()[2] for ln in lines] for r, lines in seen.items()} == shown
    if not shown:
        assert out.stdout == "", out.stdout       # the console silent
    for r in (0, 1):
        log = (tmp_path / "logs" / f"worker_{r}.log").read_text().splitlines()
        assert sorted(ln.split()[2] for ln in log) == ["err", "out"], log   # the files full


def test_pet_max_restarts_restarts_a_job_that_fails_once(tmp_path):
    rc, seen, out = run("mpilaunch", ["-np", "2", "--master_port", "0"],
                        [SHOW, "--fail-first", "3"], tmp_path, env={"PET_MAX_RESTARTS": "1"})
    assert rc == 0, out.stderr
    assert "restart=1" in (tmp_path / "logs" / "attempt1" / "worker_0.log").read_text()
    rc, _, out = run("mpilaunch", ["-np", "2", "--master_port", "0"],
                     [SHOW, "--fail-first", "3"], tmp_path / "none")
    assert rc == 3, out.stderr    # without the variable: no restart
