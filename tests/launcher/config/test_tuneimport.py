"""A tune file the ModelArts recipe already wrote is read, never overwritten."""
import os
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS
from helpers.ports import free_port
from mpilaunch.config import tuneimport
from mpilaunch.errors import UsageError

RECIPE = (
    "MA_JOB_DIR=/home/ma-user/modelarts\n"
    "MA_MULTI=first line\nsecond line\n"
    "# a comment\n"
    "\n"
    "-x NCCL_ALGO=Ring\n"
    "--mca btl_tcp_if_include lo\n"
    "MY_FLAG=1\n"
)


def test_parse_the_recipe_file():
    got = tuneimport.parse(RECIPE.rstrip("\n"), "t.env")
    assert got.values == {"MA_JOB_DIR": "/home/ma-user/modelarts", "MA_MULTI": "first line\nsecond line",
                          "MY_FLAG": "1"}
    assert got.x_tokens == ("-x", "NCCL_ALGO=Ring")
    assert got.mca_tokens == ("--mca", "btl_tcp_if_include", "lo")
    # this environment's exact value wins over what `env` printed
    assert tuneimport.selected(got, {"MA_MULTI": "first line\nsecond line\nthird"}) == [
        ("MA_JOB_DIR", "/home/ma-user/modelarts"), ("MA_MULTI", "first line\nsecond line\nthird"), ("MY_FLAG", "1")]


@pytest.mark.parametrize("text, message", [
    ("precious", "t.env:1: expected KEY=VALUE, -x NAME[=VALUE] or --mca KEY VALUE, got 'precious'"),
    ("A=1\n\n-bind-to none", "t.env:3: expected KEY=VALUE, -x NAME[=VALUE] or --mca KEY VALUE, got '-bind-to none'"),
])
def test_bad_lines_name_file_and_line(text, message):
    with pytest.raises(UsageError) as err:
        tuneimport.parse(text, "t.env")
    assert str(err.value) == message


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_recipe_tune_file_is_broadcast_and_left_untouched(mpirun, tmp_path):
    tune = tmp_path / "tune.env"
    tune.write_text(RECIPE)
    before = tune.read_bytes(), oct(os.stat(tune).st_mode)
    script = tmp_path / "show.py"
    script.write_text("import os, json\nprint(json.dumps({k: os.environ.get(k) for k in "
                      "('MA_JOB_DIR', 'MA_MULTI', 'MY_FLAG', 'NCCL_ALGO')}), flush=True)\n")
    env = clean_env(TUNE_ENV_FILE=tune, MY_FLAG="1", TMPDIR=tmp_path)
    proc = subprocess.run(mpilaunch_argv("--mpirun", mpirun, "--master_port", free_port(), "-np", "2",
                                         "--no-scheduler", "--log_dir", str(tmp_path / "logs"), str(script)),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    import json
    # each rank's own log: the console shows the two identical lines once, as [rank0,1]
    logs = tmp_path / "logs"
    seen = [json.loads(line) for r in (0, 1)
            for line in (logs / f"worker_{r}.log").read_text().splitlines() if line.startswith("{")]
    assert len(seen) == 2
    for s in seen:
        assert s == {"MA_JOB_DIR": "/home/ma-user/modelarts", "MA_MULTI": "first line\nsecond line",
                     "MY_FLAG": "1", "NCCL_ALGO": "Ring"}
    assert (tune.read_bytes(), oct(os.stat(tune).st_mode)) == before
