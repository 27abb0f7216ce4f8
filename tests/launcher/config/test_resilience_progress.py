"""--max_no_progress_restarts (mpilaunch/config/resilience.py): its default, its validation, and a
bad value stopping the launch in one line before anything starts."""
import pytest

from helpers.launch import run_cli
from mpilaunch.config import launchconfig
from mpilaunch.config.options import parser as run_parser
from mpilaunch.errors import UsageError

PY = "/venv/bin/python3"


def build(argv, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    args = run_parser().parse_args(["--python", PY, "-np", "1"] + argv + [str(script)])
    return launchconfig.build(args, {})


@pytest.mark.parametrize("argv, limit", [
    (["--max_restarts", "5"], 3),                      # the default
    (["--max_restarts", "5", "--max_no_progress_restarts", "0"], 0),   # no limit
    (["--max_restarts", "5", "--max-no-progress-restarts", "1"], 1),
    ([], 0),                                           # no restarts: nothing to limit
    (["--max_no_progress_restarts", "0"], 0),
])
def test_the_limit(argv, limit, tmp_path):
    assert build(argv, tmp_path).resilience.max_no_progress == limit


@pytest.mark.parametrize("argv, message", [
    (["--max_restarts", "5", "--max_no_progress_restarts", "-1"],
     "--max_no_progress_restarts='-1': out of range; give a whole number between 0 and 1000"),
    (["--max_restarts", "5", "--max_no_progress_restarts", "three"],
     "--max_no_progress_restarts='three': not a whole number; give a whole number between 0 and "
     "1000"),
    (["--max_no_progress_restarts", "2"],
     "--max_no_progress_restarts needs --max_restarts N: it limits the restarts"),
])
def test_a_bad_value_is_one_line(argv, message, tmp_path):
    with pytest.raises(UsageError) as err:
        build(argv, tmp_path)
    assert str(err.value) == message


def test_a_bad_value_starts_nothing(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    proc, tmpdir = run_cli(["-np", "1", "--log_dir", str(tmp_path / "logs"), "--max_restarts",
                            "2", "--max_no_progress_restarts", "x", str(script)], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("mpilaunch: error: --max_no_progress_restarts='x': not a whole number; give "
                           "a whole number between 0 and 1000\n")
    assert not (tmp_path / "logs").exists() and list(tmpdir.iterdir()) == []
