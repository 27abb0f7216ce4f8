"""The rank side's sampler (mpilaunch/rank/monitor.py) on the oldest and the newest Python the
package supports: a real ``py-spy record`` of a real 3.9 and 3.13 process, parsed and summed up
as each adapter does. On 3.9 and 3.10 py-spy knows no OS thread id and prints the Python one in
hex (``thread (0x7F3D0A1B2B80)``): the main thread is the one whose stacks start in the script,
not in threading.py's ``_bootstrap`` (a thread of the script's sleeps there all the time)."""
import glob
import os
import shutil
import subprocess
import time

import pytest

from mpilaunch.rank import monitor

TARGET = r'''
import threading, time

def heartbeat():
    while True:
        time.sleep(0.01)            # a thread asleep all the time: not the main thread's stack

def work():
    # CPU time, not wall time: on a loaded machine the busy loop then only gets longer, so the
    # main thread's samples stay mostly here whatever the load does to the 10 ms sleep below
    t = time.process_time()
    while time.process_time() - t < 0.06:
        pass

def read():
    time.sleep(0.01)

threading.Thread(target=heartbeat, daemon=True).start()
open(__import__("sys").argv[1], "w").close()
while True:
    work()
    read()
'''


def interpreter(version):
    """This machine's CPython ``version`` (pyenv's, which scripts/test.sh checks), else PATH's."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    path = found[-1] if found else shutil.which(f"python{version}")
    assert path, f"no python{version} here: scripts/test.sh installs it (pyenv install {version})"
    return path


@pytest.mark.parametrize("version", ["3.9", "3.10", "3.11", "3.12", "3.13"])
def test_the_sampler_reads_the_main_thread_of_every_python(tmp_path, version):
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([interpreter(version), str(script), str(ready)], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the target did not start"
            time.sleep(0.05)
        spy = monitor.Spy(shutil.which("py-spy"), proc.pid, 2, monitor.RATE, None)
        assert spy.wait(60), "py-spy did not end"
        raw, said = spy.texts()
    finally:
        proc.kill()
        proc.wait()
    heads = {line.split(";")[0].split(":")[0] for line in raw.splitlines()}
    assert len(heads) == 2, raw                      # the main thread and the heartbeat's
    stacks = monitor.parse_raw(raw, proc.pid)
    wait, hot, n = monitor.summarize(stacks)
    assert n >= 15 and wait == 0.0, (raw, said)
    # every stack of the main thread starts in the script; the busy loop is its hot frame
    assert all(frames[-1][0] == "<module>" for frames, _ in stacks), stacks
    assert hot == "target.py:12 in work", (hot, raw)
    assert monitor.sync_share(stacks) == 0.0
