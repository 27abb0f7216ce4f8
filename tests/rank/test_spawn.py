"""rank/spawn.py: the adapter's fork + exec (what it kept of subprocess.Popen), with real
processes."""
import errno
import json
import os
import signal
import sys

import pytest

from mpilaunch.rank import spawn

PY = sys.executable


def _run(argv, **kw):
    r, w = os.pipe()
    try:
        child = spawn.start(argv, kw.pop("env", dict(os.environ)), stdout=w, **kw)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = fh.read().decode()
    return child, child.wait(), out


def test_stdout_and_stderr_go_to_the_given_fd_and_the_status_is_the_childs():
    child, rc, out = _run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"])
    assert rc == 7 and child.returncode == 7 and child.poll() == 7
    assert sorted(out.split()) == ["err", "out"]


def test_death_by_signal_is_minus_n_and_a_late_signal_is_not_sent():
    child, rc, _ = _run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert rc == -signal.SIGKILL
    child.send_signal(signal.SIGTERM)   # reaped: nothing is signalled (the pid may be reused)
    child.kill()


def test_a_running_child_is_signalled():
    r, w = os.pipe()
    child = spawn.start([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                        dict(os.environ), stdout=w)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        assert fh.readline() == b"up\n"
        assert child.poll() is None
        child.terminate()
        assert child.wait() == -signal.SIGTERM


@pytest.mark.parametrize("argv, code", [
    (["/nonexistent/prog"], errno.ENOENT),
    (["no-such-program-anywhere"], errno.ENOENT),
    (["{tmp}/not-executable"], errno.EACCES),
    (["{tmp}/no-format"], errno.ENOEXEC),
])
def test_a_failed_exec_is_an_oserror_with_its_errno_and_nothing_is_left(tmp_path, argv, code):
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    (tmp_path / "no-format").write_bytes(b"\x00\x01\x02")
    (tmp_path / "no-format").chmod(0o755)
    argv = [a.format(tmp=tmp_path) for a in argv]
    before = _children()
    with pytest.raises(OSError) as got:
        spawn.start(argv, dict(os.environ))
    assert got.value.errno == code
    assert _children() == before     # the failed child was reaped


def test_the_program_is_looked_up_in_the_given_environments_path(tmp_path):
    prog = tmp_path / "hello-prog"
    prog.write_text("#!/bin/sh\necho found\n")
    prog.chmod(0o755)
    _, rc, out = _run(["hello-prog"], env={"PATH": f"/nonexistent:{tmp_path}"})
    assert (rc, out) == (0, "found\n")


def test_only_the_passed_fds_stay_open_in_the_child():
    keep_r, keep_w = os.pipe()
    leak_r, leak_w = os.pipe()
    for fd in (keep_r, leak_r):
        os.set_inheritable(fd, True)
    try:
        _, rc, out = _run([PY, "-c", "import os; print(sorted(int(n) for n in os.listdir('/proc/self/fd')))"],
                          pass_fds=(keep_r,))
    finally:
        for fd in (keep_r, keep_w, leak_r, leak_w):
            os.close(fd)
    open_fds = json.loads(out)
    assert keep_r in open_fds and leak_r not in open_fds and leak_w not in open_fds
    assert {0, 1, 2} <= set(open_fds)


def test_stdin_devnull_reads_end_of_file_and_the_hook_runs_in_the_child(tmp_path):
    mark = tmp_path / "hook"

    def hook():
        fd = os.open(str(mark), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)

    child, rc, out = _run([PY, "-c", "import sys; print(repr(sys.stdin.read()))"],
                          stdin=spawn.DEVNULL, preexec=hook)
    assert (rc, out.strip()) == (0, "''")
    assert mark.read_text() == str(child.pid)


def test_a_failing_hook_starts_nothing():
    def hook():
        raise OSError(errno.EPERM, "no")

    with pytest.raises(OSError) as got:
        spawn.start([PY, "-c", "pass"], dict(os.environ), preexec=hook)
    assert got.value.errno == errno.EPERM


def _children():
    return sorted(int(p) for p in open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split())


def test_the_child_does_not_inherit_pythons_ignored_sigpipe():
    """Python ignores SIGPIPE; exec keeps an ignored signal ignored, so a worker would write
    into a closed pipe forever (Popen's restore_signals; spawn does the same). grep reads its
    own /proc status: Python would reset it for itself."""
    _, rc, out = _run(["grep", "SigIgn", "/proc/self/status"])
    ignored = int(out.split()[1], 16)
    assert rc == 0
    assert not ignored & (1 << (signal.SIGPIPE - 1)) and not ignored & (1 << (signal.SIGXFSZ - 1))


def test_the_child_imports_nothing_between_fork_and_exec(monkeypatch, tmp_path):
    """A module another thread is importing at the fork stays locked in the child for ever: the
    child must not import (os.execvpe imports warnings). With the import machinery broken in
    the child, the exec still happens, and a program is still found in the env's PATH."""
    import builtins

    parent = os.getpid()
    real = builtins.__import__

    def no_import_in_the_child(*a, **kw):
        if os.getpid() != parent:
            os._exit(99)
        return real(*a, **kw)

    prog = tmp_path / "found-here"
    prog.write_text("#!/bin/sh\necho ok\n")
    prog.chmod(0o755)
    monkeypatch.setattr(builtins, "__import__", no_import_in_the_child)
    _, rc, out = _run(["found-here"], env={"PATH": f"/nonexistent:{tmp_path}"})
    assert (rc, out) == (0, "ok\n")
