"""A worker's first output for the event record: the log watch of a worker that is not tailed
(rank/firstout.py) and the relay's on_first of a tailed one (rank/relay.py)."""
import os
import threading
import time

from mpilaunch.rank import firstout, relay


def test_the_watch_reports_the_first_bytes_once(tmp_path):
    log = tmp_path / "w.log"
    log.write_bytes(b"")
    seen = []
    w = firstout.watch(str(log), lambda: seen.append(time.monotonic()))
    time.sleep(0.05)
    assert seen == []
    t = time.monotonic()
    log.write_bytes(b"hello\n")
    w.thread.join(2)
    assert len(seen) == 1 and seen[0] - t < 0.2      # within one early interval
    w.stop()
    assert len(seen) == 1


def test_stop_looks_once_more_and_returns_at_once(tmp_path):
    log = tmp_path / "w.log"
    log.write_bytes(b"")
    seen = []
    w = firstout.watch(str(log), lambda: seen.append(1))
    time.sleep(0.3)                       # its interval has grown
    log.write_bytes(b"x")                 # written just before the exit
    t = time.monotonic()
    w.stop()
    assert seen == [1] and time.monotonic() - t < 0.2 and not w.thread.is_alive()
    quiet = tmp_path / "q.log"
    quiet.write_bytes(b"")
    w = firstout.watch(str(quiet), lambda: seen.append(2))
    w.stop()
    assert seen == [1] and not w.thread.is_alive()


def test_the_relay_calls_on_first_once_after_the_log_has_it(tmp_path):
    r, w = os.pipe()
    log = os.open(str(tmp_path / "l.log"), os.O_WRONLY | os.O_CREAT)
    out_r, out_w = os.pipe()
    calls = []
    th = threading.Thread(target=relay.relay, args=(r, log, b"[rank0] ", out_w, 0.1, 1 << 16,
                                                    lambda: calls.append((tmp_path / "l.log").read_bytes())))
    th.start()
    os.write(w, b"one\n")
    time.sleep(0.1)
    os.write(w, b"two\n")
    os.close(w)
    th.join(5)
    os.close(out_w)
    assert calls == [b"one\n"]
    assert os.read(out_r, 1000) == b"[rank0] one\n[rank0] two\n"
