"""Rank-side options checked by the launcher before mpirun starts (issue 12 items 8, 9, 10, 15):
one line, exit 2, no rank started, no log written. Before, each of these started mpirun and
every adapter (10-16 lines, mpirun's banner), or was accepted (items 9, 15)."""
import os
import socket

import pytest

from helpers.launch import run_cli
from helpers.ports import free_port


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("open('STARTED', 'w').close()\n")
    return str(path)


def _one_line(proc, tmp_path, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mpilaunch: error: ")
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "STARTED").exists()
    assert not (tmp_path / "logs").exists() or not os.listdir(tmp_path / "logs")


FIX_NAME = "give a file name such as worker_{rank}.log"


@pytest.mark.parametrize("opts, needles", [
    (["--bind_core", "garbage{"], ["--bind_core='garbage{': neither True/False nor JSON"]),
    (["--bind_core", '{"device0":["999"]}'], ["CPU 999 does not exist"]),
    (["--bind_core", "[1,2]"], ["--bind_core='[1,2]': the JSON is not a dict"]),
    (["--tail_worker_log", "99"], ["--tail_worker_log='99': rank 99 does not exist (the job has 2"]),
    (["--worker_log_name", "w_{foo}.log"], ["unknown placeholder {foo}"]),
    (["--worker_log_name", "sub/w_{rank}.log"], ["has a directory part", FIX_NAME]),
    (["--worker_log_name", "../escape_{rank}.log"], ["has a directory part"]),
    (["--worker_log_name", "/tmp/abs_{rank}.log"], ["an absolute path"]),
    (["--worker_log_name", "same.log"], ["has no {rank}, so the 2 ranks would write one file"]),
    (["--log_dir", "/sys/kernel"], ["--log_dir='/sys/kernel': in /proc or /sys"]),
    (["--log_dir", "/proc/logs"], ["in /proc or /sys"]),
    (["--visible-devices", ","], ["--visible-devices=',': has an empty entry"]),
    (["--master_addr", "no-such-host.invalid"], ["--master_addr='no-such-host.invalid': does not resolve"]),
    (["--master_addr", "192.0.2.1"], ["192.0.2.1 is not an address of rank 0's host"]),
])
def test_rank_option_refused_before_mpirun(tmp_path, script, opts, needles):
    proc, _ = run_cli(["-np", "2", "--master_port", free_port(), "--log_dir",
                       str(tmp_path / "logs"), *opts, script], tmp_path)
    _one_line(proc, tmp_path, *needles)


def test_log_dir_file_under_file_and_unwritable(tmp_path, script):
    f = tmp_path / "afile"
    f.write_text("x")
    for log_dir, needle in [(str(f), "an existing file, not a directory"),
                            (str(f / "sub"), "is a file, not a directory")]:
        proc, _ = run_cli(["-np", "2", "--master_port", free_port(), "--log_dir", log_dir,
                           script], tmp_path)
        _one_line(proc, tmp_path, f"--log_dir='{log_dir}'", needle)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        proc, _ = run_cli(["-np", "2", "--log_dir", str(ro), script], tmp_path)
        _one_line(proc, tmp_path, "not writable")


def test_single_rank_may_share_a_log_name_and_dry_run_checks_too(tmp_path, script):
    proc, _ = run_cli(["--dry-run", "-np", "1", "--worker_log_name", "same.log", script], tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc, _ = run_cli(["--dry-run", "-np", "2", "--tail_worker_log", "5", script], tmp_path)
    assert proc.returncode == 2 and "rank 5 does not exist" in proc.stderr


def test_port_in_use_on_rank0_host_starts_no_rank(tmp_path, script):
    # item 15: ranks 1..N used to start the user's script (worker logs created) before rank 0's
    # port check failed
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = str(s.getsockname()[1])
        proc, _ = run_cli(["-np", "2", "--master_port", port, "--log_dir", str(tmp_path / "logs"),
                           script], tmp_path)
    _one_line(proc, tmp_path, f"--master_port={port}: already in use on rank 0's host",
              "or 0 to pick a free one")
