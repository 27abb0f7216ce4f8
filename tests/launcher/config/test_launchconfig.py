"""The configuration's rules (mpilaunch/config/launchconfig.py: build): flag > variable >
default, every value checked where the configuration is built, and every user error raised
there: before a log dir, a run dir or any process exists."""
import pytest

from helpers.launch import build_config, run_cli
from mpilaunch.config import launchconfig, mpiargs
from mpilaunch.errors import UsageError


def build(argv, env, tmp_path):
    return build_config(argv, env, tmp_path, "print('hi')\n")


@pytest.mark.parametrize("argv, env, message", [
    (["-np", "5", "-H", "a:2,b:2"], {}, "--np=5 is more than the 4 slot(s) of -H; add slots or pass --oversubscribe"),
    ([], {"OPENMPI_NP": "zero"}, "OPENMPI_NP='zero': not a whole number; give a whole number between 1 and 10000000"),
    ([], {"OPENMPI_NP": "0"}, "OPENMPI_NP='0': out of range; give a whole number between 1 and 10000000"),
    (["-np", "1"], {"SSHD_PORT": "70000"}, "SSHD_PORT='70000': out of range; give a port between 1 and 65535"),
    (["-np", "1", "--master_port", "80"], {}, "--master_port=80: a privileged port; give 0 (pick a free port) or a port between 1024 and 65535"),
    (["-np", "1"], {"OPENMPI_BIND_ARGS": "-bind-to 'none"}, "OPENMPI_BIND_ARGS: cannot split \"-bind-to 'none\": No closing quotation"),
    (["-np", "1"], {"OPENMPI_MCA_ARGS": "-mca btl"}, "OPENMPI_MCA_ARGS: option -mca needs 2 value(s)"),
    (["-np", "1", "--ssh-port", "22"], {"OPENMPI_MCA_ARGS": "-mca plm_rsh_args -p22"},
     "the ssh options are given twice: SSHD_PORT/--ssh-port/--ssh-args and a plm_rsh_args in the MCA/extra args; keep one"),
    (["-np", "1", "--tail_worker_log", "x"], {}, "--tail_worker_log='x': not a rank list; give -1 (every rank), none, or a comma list of ranks such as 0,3"),
])
def test_bad_input_is_one_clear_line(argv, env, message, tmp_path):
    with pytest.raises(UsageError) as err:
        build(argv, env, tmp_path)
    assert str(err.value) == message



def test_the_mpirun_pieces_are_split_once_in_mpiruns_order(tmp_path):
    (tmp_path / "tune.env").write_text("-x MA_FROM_FILE=1\n-mca btl ^openib\n")
    cfg = build(["--x-args", "-x A=1 -x 'B=two words'", "--extra-args=--tag-output"],
                {"OPENMPI_MCA_ARGS": "-mca pml ob1", "TUNE_ENV_FILE": str(tmp_path / "tune.env")}, tmp_path)
    assert cfg.mpi_pieces == (
        mpiargs.Piece(("-bind-to", "none", "-map-by", "slot"), "default", True),
        mpiargs.Piece(("-x", "A=1", "-x", "B=two words"), "--x-args", False),
        mpiargs.Piece(("-mca", "pml", "ob1"), "OPENMPI_MCA_ARGS", False),
        mpiargs.Piece(("--tag-output",), "--extra-args", False),
        mpiargs.Piece(("-x", "MA_FROM_FILE=1", "-mca", "btl", "^openib"), str(tmp_path / "tune.env"), False),
    )


def test_ssh_options_in_the_pieces_alone_are_the_users_own(tmp_path):
    cfg = build(["--mca-args", "-mca plm_rsh_args '-p 2222'"], {}, tmp_path)
    assert mpiargs.ssh_params_given(cfg.mpi_pieces) and cfg.ssh_port is None
    # a variable of that name is not an MCA parameter
    assert not mpiargs.ssh_params_given(build(["--x-args", "-x plm_rsh_args=1"], {}, tmp_path).mpi_pieces)


def test_ssh_twice_is_refused_only_where_mpirun_starts_the_ranks(tmp_path):
    env = {"SSHD_PORT": "2222", "OPENMPI_MCA_ARGS": "-mca plm_rsh_args -p22"}
    with pytest.raises(UsageError, match="given twice"):
        build([], env, tmp_path)
    assert build(["--launcher", "srun"], env, tmp_path).ssh_port == 2222   # srun logs in nowhere


# The user's mpirun pieces are judged while the configuration is built: a bad one leaves no
# log dir and no run dir behind (they were judged in the backends once, after both existed).
@pytest.mark.parametrize("argv, env, expected", [
    (["--x-args", "-x 'FOO"], {}, "--x-args: cannot split \"-x 'FOO\": No closing quotation"),
    (["--mca-args", "-mca plm_rsh_args '-p 22'"], {"SSHD_PORT": "2222"},
     "the ssh options are given twice: SSHD_PORT/--ssh-port/--ssh-args and a plm_rsh_args in "
     "the MCA/extra args; keep one"),
])
def test_a_bad_mpirun_piece_leaves_no_log_dir(argv, env, expected, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("open('STARTED', 'w').close()\n")
    logs = tmp_path / "logs"
    proc, tmpdir = run_cli(["-np", "1", "--log_dir", str(logs), *argv, str(script)], tmp_path, env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["mpilaunch: error: " + expected]
    assert not logs.exists()
    assert list(tmpdir.iterdir()) == []          # no run dir either
    assert not (tmp_path / "STARTED").exists()
