"""The ``mpirun --version`` cache (mpilaunch/config/mpi.py): hit, invalidation, corrupt or foreign
files, concurrent writers, permissions. A fake mpirun logs every time it is asked."""
import os
import stat
import subprocess
import sys
import time

import pytest

from mpilaunch.config import mpi

OLD = time.time() - 3600


def fake_mpirun(path, version="5.0.11", mtime=OLD):
    log = str(path) + ".calls"
    path.write_text(f"#!/bin/sh\necho x >> {log}\necho 'mpirun (Open MPI) {version}'\n")
    path.chmod(0o755)
    os.utime(path, (mtime, mtime))
    return log


def calls(log):
    try:
        with open(log) as fh:
            return len(fh.read().split())
    except FileNotFoundError:
        return 0


@pytest.fixture
def env(tmp_path, monkeypatch):
    # the files here were all written just now; only the racy-file test keeps the 2 s rule
    monkeypatch.setattr(mpi, "_RACY_NS", 0)
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_second_detect_is_served_from_the_cache(tmp_path, env):
    m = tmp_path / "mpirun"
    log = fake_mpirun(m)
    first = mpi.detect(str(m), env)
    second = mpi.detect(str(m), env)
    assert first == second == mpi.MpiInfo(str(m), (5, 0, 11), mpi.OMPI5)
    assert calls(log) == 1
    name = mpi.cache_file(env)
    assert name == str(tmp_path / "cache" / "mpilaunch" / "mpirun-version")
    assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(name)).st_mode) == 0o700


def test_a_changed_mpirun_is_asked_again(tmp_path, env):
    m = tmp_path / "mpirun"
    log = fake_mpirun(m, "5.0.11")
    assert mpi.detect(str(m), env).dialect == mpi.OMPI5
    fake_mpirun(m, "4.1.4", mtime=OLD + 10)   # same size, other mtime (ctime moves too)
    assert mpi.detect(str(m), env).version == (4, 1, 4)
    assert calls(log) == 2


def test_a_file_changed_just_now_is_not_cached(tmp_path, env, monkeypatch):
    monkeypatch.setattr(mpi, "_RACY_NS", 2_000_000_000)
    m = tmp_path / "mpirun"
    log = fake_mpirun(m, mtime=time.time())
    mpi.detect(str(m), env)
    mpi.detect(str(m), env)
    assert calls(log) == 2


def test_library_path_is_part_of_the_key(tmp_path, env):
    m = tmp_path / "mpirun"
    log = fake_mpirun(m)
    mpi.detect(str(m), env)
    mpi.detect(str(m), {**env, "LD_LIBRARY_PATH": "/opt/other/lib"})
    assert calls(log) == 2


@pytest.mark.parametrize("content", [
    b"garbage\x00\xff\n", b"", b"mpilaunch-mpirun-cache-v1\nshort\tline\n",
    b"mpilaunch-mpirun-cache-v1\n/x\tKEY\tnot-a-version\tompi5\n",
])
def test_corrupt_cache_is_ignored_and_rewritten(tmp_path, env, content):
    m = tmp_path / "mpirun"
    log = fake_mpirun(m)
    name = mpi.cache_file(env)
    os.makedirs(os.path.dirname(name), mode=0o700)
    with open(name, "wb") as fh:
        fh.write(content)
    os.chmod(name, 0o600)
    assert mpi.detect(str(m), env).version == (5, 0, 11)
    assert mpi.detect(str(m), env).version == (5, 0, 11)
    assert calls(log) == 1
    with open(name) as fh:
        assert fh.readline() == "mpilaunch-mpirun-cache-v1\n"


def test_a_cache_others_can_write_is_not_trusted(tmp_path, env):
    m = tmp_path / "mpirun"
    log = fake_mpirun(m, "5.0.11")
    mpi.detect(str(m), env)
    name = mpi.cache_file(env)
    with open(name) as fh:
        text = fh.read()
    with open(name, "w") as fh:      # someone else's claim: this mpirun is 4.1
        fh.write(text.replace("5.0.11\tompi5", "4.1.4\tompi4"))
    os.chmod(name, 0o666)
    assert mpi.detect(str(m), env).version == (5, 0, 11)
    assert calls(log) == 2
    assert stat.S_IMODE(os.stat(name).st_mode) == 0o600    # replaced by our own


def test_a_symlinked_cache_file_is_not_followed(tmp_path, env):
    m = tmp_path / "mpirun"
    log = fake_mpirun(m)
    name = mpi.cache_file(env)
    os.makedirs(os.path.dirname(name), mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("mpilaunch-mpirun-cache-v1\n")
    os.symlink(target, name)
    mpi.detect(str(m), env)
    mpi.detect(str(m), env)
    assert calls(log) == 1
    assert not os.path.islink(name)
    assert target.read_text() == "mpilaunch-mpirun-cache-v1\n"


def test_unwritable_cache_dir_still_detects(tmp_path, env):
    m = tmp_path / "mpirun"
    fake_mpirun(m)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache dir would be")
    assert mpi.detect(str(m), env).version == (5, 0, 11)


def test_no_cache_switch_and_relative_xdg(tmp_path, env):
    assert mpi.cache_file({**env, "MPILAUNCH_NO_CACHE": "1"}) is None
    rel = mpi.cache_file({**env, "XDG_CACHE_HOME": "relative/dir"})
    assert rel == os.path.join(env["HOME"], ".cache", "mpilaunch", "mpirun-version")


def test_concurrent_launches_leave_one_valid_file(tmp_path, env):
    mpiruns = []
    for i in range(6):
        m = tmp_path / f"mpirun{i}"
        fake_mpirun(m, f"5.0.{i}")
        mpiruns.append(str(m))
    code = ("import os,sys; from mpilaunch.config import mpi; mpi._RACY_NS = 0\n"
            "for p in sys.argv[1:]: assert mpi.detect(p, os.environ).version[2] == int(p[-1])\n")
    procs = [subprocess.Popen([sys.executable, "-c", code] + mpiruns[i:] + mpiruns[:i],
                              env={**os.environ, **env}) for i in range(6)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 6
    name = mpi.cache_file(env)
    entries = mpi._cache_read(name)
    assert entries, "the cache file is valid"
    assert not [f for f in os.listdir(os.path.dirname(name)) if f != "mpirun-version"]
    for p in mpiruns:   # every answer is right, cached or not
        assert mpi.detect(p, env).version[2] == int(p[-1])
