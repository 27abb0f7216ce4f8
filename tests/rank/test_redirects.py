"""torchrun's --redirects on the rank side (rank/plan.py, supervisor.py, relay.py): a stream kept
off the console goes to the worker's log directly, the other through the relay, which then
writes whole lines only to the log, so neither stream cuts a line of the other; the worker
environment's torchrun variables (rank/plan.py torchrun_env). Real processes and pipes."""
import os
import sys
import threading

import pytest

from mpilaunch.rank import relay, supervisor
from mpilaunch.rank.options import parse_torchrun
from mpilaunch.rank.plan import ChildSpec, torchrun_env

# stdout and stderr interleaved within one line's writes, unbuffered (PYTHONUNBUFFERED splits
# print's text and its newline into two writes, as a worker's are)
TWO_STREAMS = ("import os\n"
               "os.write(1, b'out one'); os.write(2, b'err one\\n'); os.write(1, b'\\n')\n"
               "os.write(2, b'err two\\n'); os.write(1, b'out two\\n')\n")


@pytest.mark.parametrize("hidden, console", [(1, "[rank0] err one\n[rank0] err two\n"),
                                             (2, "[rank0] out one\n[rank0] out two\n")])
def test_a_redirected_stream_reaches_the_log_alone_and_no_line_is_cut(hidden, console, tmp_path):
    seen = tmp_path / "console"
    out_fd = os.open(seen, os.O_WRONLY | os.O_CREAT, 0o644)
    log = tmp_path / "worker_0.log"
    try:
        spec = ChildSpec("worker", [sys.executable, "-c", TWO_STREAMS], dict(os.environ),
                         str(log), tail_prefix=b"[rank0] ", hidden=hidden)
        sup = supervisor.Supervisor([spec], 0, "h", stdout_fd=out_fd)
        child = sup.children["worker"]
        child.log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        sup._start_and_wait(child)
        sup._finish_relay(child)
        assert child.status == 0
    finally:
        os.close(out_fd)
    assert seen.read_text() == console
    assert sorted(log.read_text().splitlines()) == ["err one", "err two", "out one", "out two"]


def test_the_relay_holds_a_partial_line_from_the_log_until_it_ends(tmp_path):
    r, w = os.pipe()
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    quiet = os.open(os.devnull, os.O_WRONLY)
    t = threading.Thread(target=relay.relay, args=(r, os.dup(log), b"", quiet, 5.0), kwargs={"log_lines": True})
    t.start()
    os.write(w, b"half")
    os.write(log, b"other\n")       # the other stream, straight into the log
    os.write(w, b" done\ntail")
    os.close(w)
    t.join(10)
    os.close(log)
    os.close(quiet)
    assert (tmp_path / "log").read_text() == "other\nhalf done\ntail"


def test_torchrun_spec_and_the_workers_variables():
    tr = parse_torchrun("role=trainer;signals=SIGTERM,SIGUSR1;redirects=0:1,1:3;filter=0,1;vlr=1")
    assert [tr.hidden(r) for r in (0, 1, 2)] == [1, 3, 3]     # 2 is filtered out
    assert parse_torchrun("redirects=2").hidden(5) == 2
    env = {"ROLE_NAME": "default", "LOCAL_RANK": "1", "DEVICE_ID": "1",
           "CUDA_VISIBLE_DEVICES": "4,5"}
    torchrun_env(tr, env, 1)
    assert env == {"ROLE_NAME": "trainer", "LOCAL_RANK": "0", "DEVICE_ID": "1",
                   "CUDA_VISIBLE_DEVICES": "5", "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGUSR1"}
