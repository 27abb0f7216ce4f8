"""mpilaunch/rundir.py beyond its atomic writer: the run dir and its owner file, and reclaiming
the run dirs (and Open MPI session dirs) of dead launchers while those of live ones, of other
users and of unknown shape are left alone.

Everything happens in a private TMPDIR (the variable, which rundir reads as tempfile does). A "dead"
process is a pid with no /proc entry, or this process's pid with another start time (a reused
pid): no process is started."""
import os
import stat

import pytest

from mpilaunch import rundir


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def _start_time(pid):
    """Field 22 of /proc/PID/stat, read here independently of rundir."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def _unused_pid():
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _run_dir(tmp, name, owner):
    d = tmp / f"mpilaunch-{name}"
    d.mkdir(mode=0o700)
    (d / "hostfile").write_text("localhost slots=2\n")
    if owner is not None:
        (d / "owner").write_text(owner)
    return d


ME = os.getpid()


# --------------------------------------------------------------------------- make, owner file

def test_make_creates_a_private_dir_with_this_launchers_owner_file(tmp):
    path = rundir.make()
    assert os.path.dirname(path) == str(tmp) and os.path.basename(path).startswith("mpilaunch-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert sorted(os.listdir(path)) == ["owner"]
    owner = os.path.join(path, "owner")
    assert open(owner).read() == f"{ME} {_start_time(ME)} \n"
    assert stat.S_IMODE(os.stat(owner).st_mode) == 0o600


def test_record_mpirun_adds_its_pid_and_never_raises(tmp):
    path = rundir.make()
    rundir.record_mpirun(path, 4242)
    assert open(os.path.join(path, "owner")).read() == f"{ME} {_start_time(ME)} 4242\n"
    assert sorted(os.listdir(path)) == ["owner"]                 # no temporary left
    rundir.record_mpirun(str(tmp / "gone"), 4242)                # the dir was removed: no error
    assert not (tmp / "gone").exists()


def test_start_time_tells_a_live_process_from_a_missing_one():
    assert rundir._start_time(ME) == _start_time(ME)
    assert rundir._start_time(_unused_pid()) is None


# --------------------------------------------------------------------------- reclaim_stale

def test_reclaim_removes_only_the_dirs_of_dead_launchers(tmp):
    start = _start_time(ME)
    dead = _run_dir(tmp, "dead", f"{_unused_pid()} 123 \n")
    reused = _run_dir(tmp, "reused", f"{ME} {start + 1} \n")          # our pid, another start
    live = _run_dir(tmp, "live", f"{ME} {start} \n")
    live_old_format = _run_dir(tmp, "nostart", f"{ME} None \n")       # no start time recorded
    unfinished = _run_dir(tmp, "unfinished", None)                   # owner not yet written
    garbage = _run_dir(tmp, "garbage", "not a pid\n")
    other = tmp / "ompi-not-ours"
    other.mkdir()
    removed = rundir.reclaim_stale()
    assert sorted(removed) == sorted([str(dead), str(reused)])
    assert not dead.exists() and not reused.exists()
    assert all(d.exists() for d in (live, live_old_format, unfinished, garbage, other))


def test_reclaim_takes_a_dead_mpiruns_session_dir_with_the_run_dir(tmp):
    gone = _unused_pid()
    run = _run_dir(tmp, "a", f"{gone} 1 {gone}\n")
    session = tmp / f"ompi.{gone}"
    session.mkdir()
    (session / "pmix.host.tool").write_text("")
    assert rundir.reclaim_stale(str(tmp)) == [str(session), str(run)]
    assert sorted(os.listdir(tmp)) == []


def test_reclaim_keeps_the_session_dir_of_an_mpirun_still_running(tmp):
    run = _run_dir(tmp, "a", f"{_unused_pid()} 1 {ME}\n")         # launcher dead, "mpirun" alive
    session = tmp / f"ompi.{ME}"
    session.mkdir()
    assert rundir.reclaim_stale(str(tmp)) == [str(run)]
    assert session.exists()


def test_reclaim_never_touches_another_users_dir(tmp):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    theirs = _run_dir(tmp, "theirs", f"{_unused_pid()} 1 \n")
    os.chown(theirs, 12345, -1)
    assert rundir.reclaim_stale(str(tmp)) == []
    assert theirs.exists()


def test_reclaim_of_a_missing_tmpdir_is_nothing(tmp):
    assert rundir.reclaim_stale(str(tmp / "missing")) == []


# --------------------------------------------------------------------------- drop_session_dir

def test_drop_session_dir_of_a_reaped_mpirun(tmp):
    gone = _unused_pid()
    session = tmp / f"ompi.{gone}"
    (session / "sub").mkdir(parents=True)
    assert rundir.drop_session_dir(gone) == str(session)            # TMPDIR by default
    assert not session.exists()
    assert rundir.drop_session_dir(gone, str(tmp)) is None         # already gone


def test_drop_session_dir_keeps_a_live_processes_and_another_users(tmp):
    mine = tmp / f"ompi.{ME}"
    mine.mkdir()
    assert rundir.drop_session_dir(ME, str(tmp)) is None
    assert mine.exists()
    if os.geteuid() == 0:
        gone = _unused_pid()
        theirs = tmp / f"ompi.{gone}"
        theirs.mkdir()
        os.chown(theirs, 12345, -1)
        assert rundir.drop_session_dir(gone, str(tmp)) is None
        assert theirs.exists()


def test_the_temp_dir_is_tempfiles_and_a_tree_is_removed_without_following_links(tmp, monkeypatch):
    assert rundir.temp_dir() == str(tmp)                     # $TMPDIR first, as tempfile
    monkeypatch.setenv("TMPDIR", str(tmp / "missing"))       # not a directory: the next one
    monkeypatch.delenv("TEMP", raising=False)
    monkeypatch.delenv("TMP", raising=False)
    assert rundir.temp_dir() == "/tmp"
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    tree = tmp / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    (tree / "g").write_text("x")
    os.symlink(outside, tree / "link")
    rundir.remove_tree(str(tree))
    assert not tree.exists() and (outside / "keep").read_text() == "x"
    rundir.remove_tree(str(tree))                           # gone already: no error
