"""Bad input: exit status 2, one line naming the culprit, no traceback, nothing started or left."""
import pytest

from helpers.launch import run_cli


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("open('STARTED', 'w').close()\n")
    return str(path)


def check_one_line_error(proc, tmpdir, tmp_path, expected):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == "mpilaunch: error: " + expected
    assert "Traceback" not in proc.stderr
    assert list(tmpdir.iterdir()) == []          # no run directory created
    assert not (tmp_path / "STARTED").exists()   # nothing started


def test_bad_hostfile_line(tmp_path, script):
    hosts = tmp_path / "hosts"
    hosts.write_text("a slots=2\n\nb slots=zero\n")
    proc, tmpdir = run_cli(["--hostfile", str(hosts), script], tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path, f"{hosts}:3: slots must be a whole number, got 'zero'")


def test_missing_script(tmp_path):
    proc, tmpdir = run_cli(["-np", "1", "nope.py"], tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path, "script nope.py: no such file")


def test_np_larger_than_slots(tmp_path, script):
    proc, tmpdir = run_cli([script], tmp_path, {"OPENMPI_NP": "8", "VC_WORKER_HOSTS": "w0,w1", "MA_NUM_GPUS": "2"})
    check_one_line_error(proc, tmpdir, tmp_path,
                         "OPENMPI_NP=8 is more than the 4 slot(s) of VC_WORKER_HOSTS; add slots or pass --oversubscribe")


def test_bad_mpirun(tmp_path, script):
    proc, tmpdir = run_cli(["--mpirun", "/nonexistent/mpirun", "-np", "1", "--master_port", "0", script],
                           tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path, "--mpirun=/nonexistent/mpirun: not an executable file")


def test_unknown_flag(tmp_path, script):
    proc, tmpdir = run_cli(["--frobnicate", script], tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path, "unrecognized arguments: --frobnicate")


def test_bad_ssh_port_variable(tmp_path, script):
    proc, tmpdir = run_cli(["-np", "1", script], tmp_path, {"SSHD_PORT": "ssh"})
    check_one_line_error(proc, tmpdir, tmp_path, "SSHD_PORT='ssh': not a whole number; give a port between 1 and 65535")


def test_existing_tune_file_is_not_overwritten(tmp_path, script):
    tune = tmp_path / "mine.env"
    tune.write_text("precious\n")
    proc, tmpdir = run_cli(["-np", "1", script], tmp_path, {"TUNE_ENV_FILE": str(tune)})
    check_one_line_error(proc, tmpdir, tmp_path,
                         f"{tune}:1: expected KEY=VALUE, -x NAME[=VALUE] or --mca KEY VALUE, got 'precious'")
    assert tune.read_text() == "precious\n"


def test_dry_run_starts_nothing_and_masks_secrets(tmp_path, script):
    proc, tmpdir = run_cli(["-np", "2", "--dry-run", script], tmp_path,
                           {"AWS_SECRET_ACCESS_KEY": "hunter2", "MA_X": "a b", "OPENMPI_X_ARGS": "-x CRED_TOKEN=zzz"})
    assert proc.returncode == 0, proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr
    assert "zzz" not in proc.stdout + proc.stderr
    assert " -x CRED_TOKEN " in proc.stdout  # moved out of the argv into mpirun's environment
    assert "AWS_SECRET_ACCESS_KEY=****" in proc.stdout
    assert list(tmpdir.iterdir()) == []
    assert not (tmp_path / "STARTED").exists()


# --- hardening: each of these started mpirun, printed a traceback or was accepted

def test_tune_file_in_a_pseudo_filesystem(tmp_path, script):
    # was: rc 1, FileNotFoundError traceback from mkstemp
    proc, tmpdir = run_cli(["-np", "1", script], tmp_path, {"TUNE_ENV_FILE": "/proc/x"})
    check_one_line_error(proc, tmpdir, tmp_path,
                         "TUNE_ENV_FILE=/proc/x: cannot create files in /proc; choose a path in a writable directory")


def test_missing_rank_interpreter(tmp_path, script):
    # was: mpirun's "unable to launch" banner and rc 183/132
    proc, tmpdir = run_cli(["-np", "1", "--python", "/nonexistent/python", script], tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path,
                         "--python=/nonexistent/python: no such executable on this host; give the "
                         "absolute path of the interpreter every host has")


def test_slot_count_beyond_any_host(tmp_path, script):
    # was: accepted, mpirun saw slots=-1
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=99999999999999999999\n")
    proc, tmpdir = run_cli(["--hostfile", str(hosts), script], tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path,
                         f"{hosts}:1: slots=99999999999999999999 is more than 1,000,000 slots on one host")


def test_host_listed_twice_in_another_case(tmp_path, script):
    # was: accepted; Open MPI 5 then tried ssh to LOCALHOST
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=1\nLOCALHOST slots=1\n")
    proc, tmpdir = run_cli(["--hostfile", str(hosts), script], tmp_path)
    check_one_line_error(proc, tmpdir, tmp_path,
                         f"{hosts}:2: host 'LOCALHOST' is listed twice (first at {hosts}:1)")


@pytest.mark.parametrize("source", ["OPENMPI_X_ARGS", "OPENMPI_EXTRA_ARGS"])
def test_double_dash_x_secret_is_routed_like_dash_x(tmp_path, script, source):
    # was: --x MA_TOKEN=value landed in mpirun's argv and the dry run
    proc, _ = run_cli(["--dry-run", "-np", "1", script], tmp_path,
                      {source: "--x MA_DEPLOY_TOKEN=hunter2-value --x MA_PLAIN=ok"})
    assert proc.returncode == 0, proc.stderr
    assert "hunter2-value" not in proc.stdout
    argv_line = next(l for l in proc.stdout.splitlines() if not l.startswith("#"))
    assert "-x MA_DEPLOY_TOKEN " in argv_line and "-x MA_PLAIN=ok" in argv_line
    assert "--x" not in argv_line
