"""The sampling interval's own flag (config/monitoring.py): under the lower bound the straggler
rule could never judge, so it is one line and exit 2, nothing started; torchrun's
``--monitor-interval`` (its agent's poll period) is accepted and changes nothing."""
import pytest

from helpers.launch import run_cli


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("open('STARTED', 'w').close()\n")
    return str(path)


@pytest.mark.parametrize("value", ["4.9", "1", "0.1"])
def test_an_interval_under_the_bound_is_one_line_and_exit_2(tmp_path, script, value):
    proc, tmpdir = run_cli(["-np", "1", "--master_port", "0", "--sample-interval", value, script],
                           tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == (f"mpilaunch: error: --sample-interval={value}: under 5 s a round holds "
                           "fewer than the 20 stack samples the straggler rule judges; give 5 or "
                           "more, or 0 for off\n")
    assert list(tmpdir.iterdir()) == [] and not (tmp_path / "STARTED").exists()


def test_torchruns_monitor_interval_is_accepted_and_leaves_the_sampling_alone(tmp_path, script):
    def rank_flag(*more):
        proc, _ = run_cli(["-np", "1", "--master_port", "0", "--dry-run", *more, script], tmp_path)
        assert proc.returncode == 0, proc.stderr
        argv = proc.stdout.split()
        return argv[argv.index("--monitor-interval") + 1] if "--monitor-interval" in argv else None

    sampled = rank_flag("--sample-interval", "7")
    assert sampled == "7"
    assert rank_flag("--sample-interval", "7", "--monitor-interval", "0.1") == "7"
    assert rank_flag("--sample-interval", "0", "--monitor_interval", "5") is None
