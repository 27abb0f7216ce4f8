"""rundir.write_atomic, the one atomic file writer (run dir files, mpilaunch job's hostfile, the
mpirun version cache): never a half-written file, 0600 whatever the umask, nothing left behind."""
import os
import re
import stat

import pytest

from helpers import REPO
from mpilaunch import rundir
from mpilaunch.config import mpi
from mpilaunch.job import worker0


def _names(d):
    return sorted(p.name for p in d.iterdir())


def test_writes_0600_whatever_the_umask_and_leaves_no_temporary(tmp_path):
    old = os.umask(0)
    try:
        rundir.write_atomic(str(tmp_path / "f"), "a\n")
    finally:
        os.umask(old)
    assert (tmp_path / "f").read_text() == "a\n"
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o600
    assert _names(tmp_path) == ["f"]


def test_replaces_an_existing_file_whole(tmp_path):
    path = tmp_path / "f"
    path.write_text("old and longer\n")
    inode = os.stat(path).st_ino
    rundir.write_atomic(str(path), "new\n")
    assert path.read_text() == "new\n" and os.stat(path).st_ino != inode   # renamed over
    big = "x" * (1 << 20) + "\udcff"                   # surrogate-escaped bytes survive
    rundir.write_atomic(str(path), big)
    assert path.read_bytes() == b"x" * (1 << 20) + b"\xff"


def test_a_failure_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_text("old\n")

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        rundir.write_atomic(str(path), "new\n")
    assert path.read_text() == "old\n" and _names(tmp_path) == ["f"]


def test_never_writes_through_a_symlink_planted_as_the_temporary(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    monkeypatch.setattr(os, "urandom", lambda n: b"\0" * n)
    os.symlink(victim, tmp_path / f".f.{os.getpid()}.{'00' * 4}.tmp")
    with pytest.raises(FileExistsError):
        rundir.write_atomic(str(tmp_path / "f"), "new\n")
    assert victim.read_text() == "keep\n"


def test_every_writer_is_this_one(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(mpi, "write_atomic", lambda path, text: written.append(path))
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    mpi._cache_put(env, "/x/mpirun", "key", (5, 0, 1), mpi.OMPI5)
    assert written == [mpi.cache_file(env)]
    monkeypatch.setattr(rundir, "write_atomic", lambda path, text: written.append(path))
    spec = worker0.JobSpec(("a", "b"), 0, 2, None, (), "k")
    assert worker0.write_hostfile(spec, str(tmp_path)) == str(tmp_path / "hostfile")
    assert written[-1] == str(tmp_path / "hostfile")


def test_nothing_else_renames_a_file_into_place():
    """One writer: no other module of the package creates-exclusive or renames over a file."""
    pkg = os.path.join(REPO, "mpilaunch")
    found = []
    for d, _, files in os.walk(pkg):
        for f in files:
            path = os.path.join(d, f)
            if f.endswith(".py") and path != rundir.__file__:
                text = open(path, encoding="utf-8").read()
                if re.search(r"os\.replace\(|os\.rename\(|O_EXCL", text):
                    found.append(os.path.relpath(path, REPO))
    assert found == []
